// weft/semaphore.hpp: weft::semaphore, an async counting semaphore with FIFO waiters.
//
// Protocol: a short lock guards the count and the FIFO of waiters. Invariant: waiters
// exist only while the count is 0. release() hands permits straight to the oldest
// waiters before adding the rest to the count, so try_acquire never overtakes a waiter
// and no wake-up is lost.
#pragma once

#include <coroutine>
#include <cstddef>
#include <mutex>

#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"

namespace weft {

/// A counting semaphore: `co_await s.acquire()` takes a permit, suspending the task while
/// there is none; release(n) returns permits. Waiters are served in FIFO order and
/// resume on the executor they suspended on. Thread-safe. Destroying it while waited on
/// is a programming error.
class semaphore {
 public:
  /// Starts with `initial` permits.
  explicit semaphore(std::size_t initial = 0) noexcept : m_count(initial) {}
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;

  /// Takes a permit if one is free now (and nobody waits); true on success. Thread-safe.
  bool try_acquire() noexcept {
    std::lock_guard lock(m_lock);
    if (m_count == 0) return false;
    --m_count;
    return true;
  }

  /// Returns `n` permits: the oldest waiters get one each, the rest are counted.
  /// Thread-safe.
  void release(std::size_t n = 1) noexcept {
    detail::deferred_wakes woken;  // destroyed after the lock guard: wakes after unlocking
    std::lock_guard lock(m_lock);
    for (; n != 0 && !m_waiters.empty(); --n) woken.add(m_waiters.pop_front());
    m_count += n;
  }

  /// Permits free now (a snapshot). Thread-safe.
  std::size_t available() const noexcept {
    std::lock_guard lock(m_lock);
    return m_count;
  }

  /// Awaiter of acquire() (see detail::park_awaiter).
  using acquire_awaiter = detail::park_awaiter<semaphore>;

  /// `co_await s.acquire()`: takes a permit, waiting in FIFO order while there is none.
  /// Throws weft::cancelled, no permit taken, when the awaiting task's stop token is
  /// stopped while it waits (weft/stop.hpp).
  [[nodiscard]] acquire_awaiter acquire() noexcept { return acquire_awaiter{*this}; }

  /// Blocking acquire for plain threads. Thread-safe.
  void acquire_wait() noexcept { detail::park_blocking(*this); }

 private:
  template <class Owner>
  friend class detail::park_awaiter;
  template <class Owner>
  friend void detail::park_blocking(Owner&) noexcept;
  bool try_now() noexcept { return try_acquire(); }
  template <class Owner>
  friend bool detail::cancel_owner_wait(void*, detail::waiter&) noexcept;
  bool park(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    if (!node.begin_park()) return false;
    if (m_count != 0) {
      --m_count;
      return false;
    }
    m_waiters.push_back(&node);
    return true;
  }
  bool cancel_wait(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    return m_waiters.cancel(node);
  }

  mutable detail::spin_lock m_lock;
  std::size_t m_count;
  detail::waiter_list m_waiters;
};

}  // namespace weft
