// weft/detail/mpmc_ring.hpp: the element store of a bounded weft::channel: a lock-free
// multi-producer multi-consumer ring of exactly `capacity` slots. Not API.
//
// Two counters, `tail` (next push) and `head` (next pull), each a stamp: the slot index
// in the low bits, the lap above them, and in `tail` one more bit, set by close(). Each
// slot has a stamp too, which says what it waits for: equal to the tail stamp of its
// next push while it is free, that plus one once the element is written, and the head
// stamp of its next pull's lap after that pull (head + one lap). A push claims slot
// `tail` with one CAS on `tail` when the slot's stamp says free, builds the element,
// then publishes it by storing the slot's stamp; a pull claims with one CAS on `head`
// when the stamp says written, moves the element out, destroys it, and frees the slot
// by storing its stamp. So every element is taken by exactly one pull, in the order of
// the pushes' claims, and pushes and pulls never take a lock.
//
// Neither side ever waits for the other. A push that finds its slot still being read
// (claimed by a pull that has not freed it) reports full; a pull that finds its slot
// claimed by a push that has not published reports empty. The channel (weft/channel.hpp)
// parks the caller then, and the party that was in flight settles it once it has
// published: so a preempted thread never makes another spin.
//
// Memory order: claims and publications are seq_cst (one locked instruction each on
// x86), so that the channel can check for parked parties right after a publication
// (the Dekker pattern of weft/channel.hpp); the slot stamps' release/acquire pairs
// carry the elements.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "weft/detail/spin_lock.hpp"

namespace weft::detail {

/// What a try_push / try_pop of a store did.
enum class store_status : std::uint8_t {
  ok,      ///< done
  full,    ///< push: no free slot now (or the free one is still being read)
  empty,   ///< pop: nothing published now (or the next one is still being written)
  closed,  ///< push: closed; pop: closed and every element taken
};

/// After losing a CAS race on a contended counter: pause for 2, 4, ... 64 rounds as the
/// losses add up, so that the winner keeps the cache line for its next operations
/// instead of the two trading it on every attempt.
WEFT_INLINE void cas_backoff(unsigned& losses) noexcept {
  const unsigned rounds = 2u << (losses < 5 ? losses : 5);
  for (unsigned i = 0; i < rounds; ++i) cpu_relax();
  ++losses;
}

template <class T>
class mpmc_ring {
  struct slot {
    std::atomic<std::uint64_t> m_stamp;
    alignas(T) unsigned char m_storage[sizeof(T)];
    T* value() noexcept { return std::launder(reinterpret_cast<T*>(m_storage)); }
  };

 public:
  /// A ring of exactly `capacity` slots (1 <= capacity <= 2^32).
  explicit mpmc_ring(std::size_t capacity)
      : m_capacity(capacity),
        m_mark(std::bit_ceil(static_cast<std::uint64_t>(capacity) + 1)),
        m_one_lap(m_mark * 2),
        m_slots(new slot[capacity]) {
    for (std::size_t i = 0; i < capacity; ++i) m_slots[i].m_stamp.store(i, std::memory_order_relaxed);
  }
  mpmc_ring(const mpmc_ring&) = delete;
  mpmc_ring& operator=(const mpmc_ring&) = delete;
  /// Destroys the elements still stored. Nothing may use the ring any more.
  ~mpmc_ring() {
    std::uint64_t h = m_head.load(std::memory_order_relaxed);
    const std::uint64_t t = m_tail.load(std::memory_order_relaxed) & ~m_mark;
    while (h != t) {
      m_slots[h & (m_mark - 1)].value()->~T();
      h = next(h);
    }
  }

  /// Pushes T(std::forward<U>(v)) if a slot is free: ok, full or closed; `v` is used
  /// only when the result is ok. Never blocks. Thread-safe. Building T must not throw
  /// (weft::channel builds a T first when it could).
  template <class U>
    requires std::is_nothrow_constructible_v<T, U&&>
  store_status try_push(U&& v) noexcept {
    std::uint64_t tail = m_tail.load(std::memory_order_relaxed);
    for (unsigned losses = 0;;) {
      if ((tail & m_mark) != 0) [[unlikely]]
        return store_status::closed;
      slot& s = m_slots[tail & (m_mark - 1)];
      const std::uint64_t stamp = s.m_stamp.load(std::memory_order_acquire);
      if (stamp == tail) {  // free at this lap
        if (m_tail.compare_exchange_weak(tail, next(tail), std::memory_order_seq_cst, std::memory_order_relaxed)) {
          ::new (static_cast<void*>(s.m_storage)) T(std::forward<U>(v));
          s.m_stamp.store(tail + 1, std::memory_order_seq_cst);
          return store_status::ok;
        }
        cas_backoff(losses);
        continue;  // `tail` holds the new value
      }
      // The element of the previous lap is still there (or being read): full.
      if (stamp + m_one_lap == tail + 1) return store_status::full;
      // Another push took this slot meanwhile: try the next.
      tail = m_tail.load(std::memory_order_relaxed);
    }
  }

  /// Moves the oldest element into `out(T&&)` and destroys it: ok, empty or closed
  /// (closed and drained). `out` must not throw. Never blocks. Thread-safe.
  template <class Out>
  store_status try_pop(Out&& out) noexcept {
    std::uint64_t head = m_head.load(std::memory_order_relaxed);
    for (unsigned losses = 0;;) {
      slot& s = m_slots[head & (m_mark - 1)];
      const std::uint64_t stamp = s.m_stamp.load(std::memory_order_acquire);
      if (stamp == head + 1) {  // written at this lap
        if (m_head.compare_exchange_weak(head, next(head), std::memory_order_seq_cst, std::memory_order_relaxed)) {
          T* p = s.value();
          out(std::move(*p));
          p->~T();
          s.m_stamp.store(head + m_one_lap, std::memory_order_seq_cst);
          return store_status::ok;
        }
        cas_backoff(losses);
        continue;  // `head` holds the new value
      }
      if (stamp == head) {
        // Free at this lap: empty, or a push claimed it and is still writing (tail is
        // past it); either way, nothing to take now.
        const std::uint64_t tail = m_tail.load(std::memory_order_seq_cst);
        return (tail & ~m_mark) == head && (tail & m_mark) != 0 ? store_status::closed : store_status::empty;
      }
      // Another pull took this slot meanwhile: try the next.
      head = m_head.load(std::memory_order_relaxed);
    }
  }

  /// Closes the ring: every later push reports closed. True the first time.
  bool close() noexcept { return (m_tail.fetch_or(m_mark, std::memory_order_seq_cst) & m_mark) == 0; }
  /// True once close() was called.
  bool closed() const noexcept { return (m_tail.load(std::memory_order_seq_cst) & m_mark) != 0; }

  /// How many pulls and how many pushes have claimed a slot so far (relaxed snapshots):
  /// a party that found the ring full or empty reads the other side's count to tell
  /// whether it is running right now, and how much room or how many elements it made.
  std::uint64_t pulls() const noexcept { return position(m_head.load(std::memory_order_relaxed)); }
  std::uint64_t pushes() const noexcept { return position(m_tail.load(std::memory_order_relaxed) & ~m_mark); }

  /// Elements stored (claimed by pushes, not yet by pulls): a snapshot.
  std::size_t size() const noexcept {
    const std::uint64_t h = position(m_head.load(std::memory_order_seq_cst));
    const std::uint64_t t = position(m_tail.load(std::memory_order_seq_cst) & ~m_mark);
    return t > h ? static_cast<std::size_t>(t - h) : 0;
  }

 private:
  /// The stamp after `s`: the next index, or index 0 of the next lap.
  std::uint64_t next(std::uint64_t s) const noexcept {
    const std::uint64_t index = s & (m_mark - 1);
    return index + 1 < m_capacity ? s + 1 : (s & ~(m_one_lap - 1)) + m_one_lap;
  }
  /// How many slots come before stamp `s` (mark bit clear).
  std::uint64_t position(std::uint64_t s) const noexcept { return (s / m_one_lap) * m_capacity + (s & (m_mark - 1)); }

  const std::size_t m_capacity;
  const std::uint64_t m_mark;     // the closed bit of `tail`; the index bits are below it
  const std::uint64_t m_one_lap;  // one lap: the lowest lap bit
  const std::unique_ptr<slot[]> m_slots;
  alignas(64) std::atomic<std::uint64_t> m_head{0};
  alignas(64) std::atomic<std::uint64_t> m_tail{0};
};

}  // namespace weft::detail
