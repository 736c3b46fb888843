// weft/detail/segment_queue.hpp: the element store of weft::channel. Not API.
//
// A FIFO of T in segments linked head to tail, with two ends that two different locks
// guard (weft/channel.hpp): the push end (emplace_back, full) belongs to whoever holds
// the producers' lock, the pull end (empty, front, pop_front) to whoever holds the
// consumers' lock, so one producer and one consumer run at the same time without
// sharing a lock. The ends meet through two counters: `pushed`, stored with release
// after an element is built, and `popped`, stored with release after one is destroyed.
// Each end keeps its own copy of the other's counter and reloads it only when its copy
// says empty (pull end) or full (push end): with a backlog, a consumer reads the
// producer's cache line once per batch, not once per element.
//
// A segment is written only by the push end until it is full, and linked to the next
// one before any element of that one is published, so the pull end follows the links
// only past published elements. The pull end leaves a segment once it is used up and an
// element is published past it, and frees it then: the push end has left it for good.
// A stub segment of capacity 0 is the first segment, so neither end ever sees none.
//
// Segment sizes follow the backlog: 16 KiB while the queue is short; while it is longer
// than the tail segment, each new segment doubles, up to 2 MiB, and those of 2 MiB are
// mapped on their own with transparent huge pages advised (one page fault per 2 MiB
// instead of 512: a producer far ahead of its consumers spends its time pushing, not
// faulting). One freed small segment is kept as a spare (handed from the pull end to
// the push end through an atomic pointer), so a channel that stays near empty does not
// allocate in its steady state.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace weft::detail {

template <class T>
class segment_queue {
  static constexpr std::size_t k_small_bytes = 16 * 1024;
  static constexpr std::size_t k_huge_bytes = 2 * 1024 * 1024;  // also the huge page size

  struct segment {
    segment* m_next = nullptr;
    std::size_t m_capacity = 0;  // elements
    bool m_mapped = false;       // one mmap'ed huge page rather than operator new'ed

    // Where the elements start: after these fields, aligned for T.
    static constexpr std::size_t k_header =
        (sizeof(segment*) + sizeof(std::size_t) + sizeof(bool) + alignof(T) - 1) / alignof(T) * alignof(T);
    T* at(std::size_t i) noexcept {
      return std::launder(reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(this) + k_header) + i);
    }
    void* raw(std::size_t i) noexcept { return reinterpret_cast<unsigned char*>(this) + k_header + i * sizeof(T); }
  };
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "weft::channel<T>: over-aligned T is not supported");

  // Elements of a small segment, and of the largest: one huge page, header included
  // (at least the small size, for a huge T: then it is not mapped on its own).
  static constexpr std::size_t k_small = sizeof(T) * 32 > k_small_bytes ? 32 : k_small_bytes / sizeof(T);
  static constexpr std::size_t k_huge_capacity = (k_huge_bytes - segment::k_header) / sizeof(T);
  static constexpr std::size_t k_largest = k_huge_capacity > k_small ? k_huge_capacity : k_small;

 public:
  segment_queue() = default;
  segment_queue(const segment_queue&) = delete;
  segment_queue& operator=(const segment_queue&) = delete;
  /// Destroys the elements left. Nothing may use either end any more.
  ~segment_queue() {
    m_pull.m_pushed_seen = m_push.m_pushed.load(std::memory_order_acquire);
    while (!empty()) {
      front();  // steps into the next segment when needed
      pop_front();
    }
    for (segment* s = m_pull.m_head; s != nullptr;) {
      segment* next = s->m_next;
      if (s != &m_stub) deallocate(s);
      s = next;
    }
    if (segment* spare = m_spare.load(std::memory_order_acquire)) deallocate(spare);
  }

  /// Elements stored now: a snapshot, callable from anywhere.
  std::size_t size() const noexcept {
    const std::uint64_t popped = m_pull.m_popped.load(std::memory_order_acquire);  // first: never above pushed
    return static_cast<std::size_t>(m_push.m_pushed.load(std::memory_order_acquire) - popped);
  }

  // ---- push end (the producers' lock) ----------------------------------------------

  /// True when `capacity` or more elements are stored. Push end.
  bool full(std::size_t capacity) noexcept {
    if (m_push.m_pushed_local - m_push.m_popped_seen < capacity) [[likely]]
      return false;
    m_push.m_popped_seen = m_pull.m_popped.load(std::memory_order_acquire);
    return m_push.m_pushed_local - m_push.m_popped_seen >= capacity;
  }

  /// Appends a T built from `args`. Push end. Strong guarantee: throws (std::bad_alloc,
  /// or what T's constructor throws) with the queue's elements unchanged.
  template <class... Args>
  void emplace_back(Args&&... args) {
    if (m_push.m_tail_index == m_push.m_tail->m_capacity) [[unlikely]]
      grow();
    ::new (m_push.m_tail->raw(m_push.m_tail_index)) T(std::forward<Args>(args)...);
    ++m_push.m_tail_index;
    // release: the element (and the link to its segment) before the count that shows it.
    m_push.m_pushed.store(++m_push.m_pushed_local, std::memory_order_release);
  }

  // ---- pull end (the consumers' lock) ----------------------------------------------

  /// True when no element is stored. Pull end.
  bool empty() noexcept {
    if (m_pull.m_popped_local != m_pull.m_pushed_seen) [[likely]]
      return false;
    m_pull.m_pushed_seen = m_push.m_pushed.load(std::memory_order_acquire);  // pairs with emplace_back
    return m_pull.m_popped_local == m_pull.m_pushed_seen;
  }

  /// The oldest element. Pull end; precondition: !empty() (called at this end).
  T& front() noexcept {
    if (m_pull.m_head_index == m_pull.m_head->m_capacity) [[unlikely]]
      advance();
    return *m_pull.m_head->at(m_pull.m_head_index);
  }

  /// Destroys the oldest element. Pull end; precondition: front() was called since the
  /// last pop_front().
  void pop_front() noexcept {
    m_pull.m_head->at(m_pull.m_head_index)->~T();
    ++m_pull.m_head_index;
    // release: the element is gone before the push end sees its place free.
    m_pull.m_popped.store(++m_pull.m_popped_local, std::memory_order_release);
  }

 private:
  /// Push end: a new tail segment, linked after the current one.
  void grow() {
    std::size_t capacity = k_small;
    const std::uint64_t backlog = m_push.m_pushed_local - m_pull.m_popped.load(std::memory_order_relaxed);
    if (backlog >= m_push.m_tail->m_capacity && m_push.m_tail != &m_stub)  // a backlog: grow geometrically
      capacity = m_push.m_tail->m_capacity * 2 < k_largest ? m_push.m_tail->m_capacity * 2 : k_largest;
    segment* s = nullptr;
    // acquire: the pull end's last use of the spare happened before.
    if (capacity == k_small) s = m_spare.exchange(nullptr, std::memory_order_acquire);
    if (s == nullptr) s = allocate(capacity);
    s->m_next = nullptr;
    m_push.m_tail->m_next = s;  // published with the first element stored in s
    m_push.m_tail = s;
    m_push.m_tail_index = 0;
  }

  /// Pull end: leaves the used-up head segment for the next one (which exists: an
  /// element is published past the head segment).
  void advance() noexcept {
    segment* old = std::exchange(m_pull.m_head, m_pull.m_head->m_next);
    m_pull.m_head_index = 0;
    if (old == &m_stub) return;
    segment* expected = nullptr;
    // release: every use of `old` at this end happened before the push end reuses it.
    if (old->m_capacity != k_small ||
        !m_spare.compare_exchange_strong(expected, old, std::memory_order_release, std::memory_order_relaxed))
      deallocate(old);
  }

  static segment* allocate(std::size_t capacity) {
    const std::size_t bytes = segment::k_header + capacity * sizeof(T);
    void* p;
    bool mapped = false;
    if (capacity == k_huge_capacity && capacity > k_small) {  // exactly one huge page
      p = map_huge();
      mapped = true;
    } else {
      p = ::operator new(bytes);
    }
    auto* s = ::new (p) segment;
    s->m_capacity = capacity;
    s->m_mapped = mapped;
    return s;
  }

  static void deallocate(segment* s) noexcept {
    const bool mapped = s->m_mapped;
    s->~segment();
    if (mapped)
      ::munmap(s, k_huge_bytes);
    else
      ::operator delete(s);
  }

  /// One huge page of fresh memory, aligned, with transparent huge pages advised.
  static void* map_huge() {
    constexpr std::size_t bytes = k_huge_bytes;
    constexpr std::size_t padded = 2 * k_huge_bytes;
    void* raw = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto begin = reinterpret_cast<std::uintptr_t>(raw);
    const auto aligned = (begin + k_huge_bytes - 1) & ~(std::uintptr_t{k_huge_bytes} - 1);
    if (aligned != begin) ::munmap(raw, aligned - begin);  // trim the unaligned head and tail
    const std::uintptr_t end = aligned + bytes;
    if (begin + padded != end) ::munmap(reinterpret_cast<void*>(end), begin + padded - end);
    ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // advice only: failure is fine
    return reinterpret_cast<void*>(aligned);
  }

  segment m_stub;  // capacity 0: the first head and tail

  // Each end on cache lines of its own: the other end reads only its counter, and only
  // when its own copy runs out.
  struct alignas(64) pull_end {
    segment* m_head;
    std::size_t m_head_index = 0;      // next element to pop, in m_head
    std::uint64_t m_popped_local = 0;  // elements popped (this end's copy)
    std::uint64_t m_pushed_seen = 0;   // the push end's count, as last read
    std::atomic<std::uint64_t> m_popped{0};
  } m_pull{&m_stub};
  struct alignas(64) push_end {
    segment* m_tail;
    std::size_t m_tail_index = 0;      // next free place, in m_tail
    std::uint64_t m_pushed_local = 0;  // elements pushed (this end's copy)
    std::uint64_t m_popped_seen = 0;   // the pull end's count, as last read
    std::atomic<std::uint64_t> m_pushed{0};
  } m_push{&m_stub};
  alignas(64) std::atomic<segment*> m_spare{nullptr};
};

}  // namespace weft::detail
