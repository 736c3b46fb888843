// weft/latch.hpp: weft::latch, a single-use countdown that tasks and threads await.
//
// Protocol: a short lock guards the count and the FIFO of waiters; the count_down that
// reaches zero takes every waiter under that lock and wakes them after it.
#pragma once

#include <coroutine>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>

#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"

namespace weft {

/// A countdown: count_down() decrements, and every wait completes once it reached zero
/// (it never goes up again). Waiters resume oldest first, on the executor they
/// suspended on. Thread-safe. Destroying it while waited on is a programming error.
class latch {
 public:
  /// Starts at `count` (0: already open).
  explicit latch(std::size_t count) noexcept : m_count(count) {}
  latch(const latch&) = delete;
  latch& operator=(const latch&) = delete;

  /// Decrements by `n`; reaching zero resumes every waiter. Throws std::logic_error if
  /// `n` is more than what is left (nothing changes then). Thread-safe.
  void count_down(std::size_t n = 1) {
    detail::waiter* all = nullptr;
    {
      std::lock_guard lock(m_lock);
      if (n > m_count)
        throw std::logic_error("weft::latch::count_down(" + std::to_string(n) + "): only " + std::to_string(m_count) +
                               " left");
      m_count -= n;
      if (m_count == 0) all = m_waiters.take_all();
    }
    detail::wake_chain(all);
  }

  /// True once the count reached zero. Thread-safe.
  bool try_wait() const noexcept {
    std::lock_guard lock(m_lock);
    return m_count == 0;
  }

  /// Awaiter of wait() (see detail::park_awaiter).
  using wait_awaiter = detail::park_awaiter<latch>;

  /// `co_await l.wait()`: continues once the count is zero. Throws weft::cancelled when
  /// the awaiting task's stop token is stopped while it waits (weft/stop.hpp).
  [[nodiscard]] wait_awaiter wait() noexcept { return wait_awaiter{*this}; }

  /// Blocking wait for plain threads. Thread-safe.
  void wait_blocking() noexcept { detail::park_blocking(*this); }

 private:
  template <class Owner>
  friend class detail::park_awaiter;
  template <class Owner>
  friend void detail::park_blocking(Owner&) noexcept;
  bool try_now() noexcept { return try_wait(); }
  template <class Owner>
  friend bool detail::cancel_owner_wait(void*, detail::waiter&) noexcept;
  bool park(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    if (!node.begin_park() || m_count == 0) return false;
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
