// weft/detail/segment_queue.hpp: the element store of weft::channel. Not API.
//
// A FIFO of T in segments linked head to tail. Pushing at the tail allocates a segment
// only when the tail one is full; popping the last element of the head segment frees
// it, so memory follows the backlog as consumers advance. One emptied small segment is
// kept as a spare, and an empty queue rewinds into its single segment, so a channel that
// stays near empty (a bounded one, or a consumer keeping up) never allocates in its
// steady state.
//
// Segment sizes follow the backlog: 16 KiB while the queue is short; while it is longer
// than the tail segment, each new segment doubles, up to 2 MiB, and those of 2 MiB are
// mapped on their own with transparent huge pages advised (one page fault per 2 MiB
// instead of 512: a producer far ahead of its consumers spends its time pushing, not
// faulting). Not thread-safe: the channel's lock guards it.
#pragma once

#include <sys/mman.h>

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
    std::size_t m_capacity;  // elements
    bool m_mapped;           // one mmap'ed huge page rather than operator new'ed

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
  ~segment_queue() {
    while (m_size != 0) pop_front();
    for (segment* s = m_head; s != nullptr;) deallocate(std::exchange(s, s->m_next));
    if (m_spare != nullptr) deallocate(m_spare);
  }

  std::size_t size() const noexcept { return m_size; }
  bool empty() const noexcept { return m_size == 0; }

  /// Appends a T built from `args`. Strong guarantee: throws (std::bad_alloc, or what
  /// T's constructor throws) with the queue's elements unchanged.
  template <class... Args>
  void emplace_back(Args&&... args) {
    if (m_tail == nullptr || m_tail_index == m_tail->m_capacity) [[unlikely]] grow();
    ::new (m_tail->raw(m_tail_index)) T(std::forward<Args>(args)...);
    ++m_tail_index;
    ++m_size;
  }

  /// The oldest element. Precondition: !empty().
  T& front() noexcept { return *m_head->at(m_head_index); }

  /// Destroys the oldest element. Precondition: !empty().
  void pop_front() noexcept {
    m_head->at(m_head_index)->~T();
    ++m_head_index;
    if (--m_size == 0) {
      // Empty: rewind into the head segment and drop the others.
      for (segment* s = m_head->m_next; s != nullptr;) release(std::exchange(s, s->m_next));
      m_head->m_next = nullptr;
      m_tail = m_head;
      m_head_index = m_tail_index = 0;
    } else if (m_head_index == m_head->m_capacity) {
      release(std::exchange(m_head, m_head->m_next));
      m_head_index = 0;
    }
  }

 private:
  void grow() {
    std::size_t capacity = k_small;
    if (m_tail != nullptr && m_size >= m_tail->m_capacity)  // a backlog: grow geometrically
      capacity = m_tail->m_capacity * 2 < k_largest ? m_tail->m_capacity * 2 : k_largest;
    segment* s;
    if (capacity == k_small && m_spare != nullptr) s = std::exchange(m_spare, nullptr);
    else s = allocate(capacity);
    s->m_next = nullptr;
    if (m_tail != nullptr) m_tail->m_next = s;
    else m_head = s;
    m_tail = s;
    m_tail_index = 0;
  }

  void release(segment* s) noexcept {
    if (s->m_capacity == k_small && m_spare == nullptr) m_spare = s;
    else deallocate(s);
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
    if (mapped) ::munmap(s, k_huge_bytes);
    else ::operator delete(s);
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

  segment* m_head = nullptr;
  segment* m_tail = nullptr;
  std::size_t m_head_index = 0;  // next element to pop, in m_head
  std::size_t m_tail_index = 0;  // next free place, in m_tail
  std::size_t m_size = 0;
  segment* m_spare = nullptr;
};

}  // namespace weft::detail
