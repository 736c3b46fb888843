// weft/event.hpp: weft::manual_reset_event and weft::auto_reset_event.
//
// Protocol (both): a short lock guards the `set` flag and the FIFO of waiters; a waiter
// is queued only after seeing the flag clear under that lock, and set() takes the
// waiters under the same lock, so no wake-up is lost. Waiters are woken oldest first,
// after the lock is released, on the executor they suspended on.
#pragma once

#include <coroutine>
#include <mutex>
#include <utility>

#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"

namespace weft {

/// An event that stays set until reset(): set() releases every waiter, and waits while
/// it is set complete at once. Thread-safe. Destroying it while waited on is a
/// programming error.
class manual_reset_event {
 public:
  /// Starts set when `initially_set`, else clear.
  explicit manual_reset_event(bool initially_set = false) noexcept : m_set(initially_set) {}
  manual_reset_event(const manual_reset_event&) = delete;
  manual_reset_event& operator=(const manual_reset_event&) = delete;

  /// Sets the event and resumes every waiter (oldest first). Idempotent. Thread-safe.
  void set() noexcept {
    detail::waiter* all;
    {
      std::lock_guard lock(m_lock);
      m_set = true;
      all = m_waiters.take_all();
    }
    detail::wake_chain(all);
  }
  /// Clears the event: later waits suspend until the next set(). Thread-safe.
  void reset() noexcept {
    std::lock_guard lock(m_lock);
    m_set = false;
  }
  /// True while set. Thread-safe.
  bool is_set() const noexcept {
    std::lock_guard lock(m_lock);
    return m_set;
  }

  /// Awaiter of wait() (see detail::park_awaiter).
  using wait_awaiter = detail::park_awaiter<manual_reset_event>;

  /// `co_await ev.wait()`: continues once the event is set (at once if it is).
  /// Throws weft::cancelled when the awaiting task's stop token is stopped while it
  /// waits (weft/stop.hpp).
  [[nodiscard]] wait_awaiter wait() noexcept { return wait_awaiter{*this}; }

  /// Blocking wait for plain threads. Thread-safe.
  void wait_blocking() noexcept { detail::park_blocking(*this); }

 private:
  template <class Owner>
  friend class detail::park_awaiter;
  template <class Owner>
  friend void detail::park_blocking(Owner&) noexcept;
  bool try_now() const noexcept { return is_set(); }
  template <class Owner>
  friend bool detail::cancel_owner_wait(void*, detail::waiter&) noexcept;
  bool park(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    if (!node.begin_park() || m_set) return false;
    m_waiters.push_back(&node);
    return true;
  }
  bool cancel_wait(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    return m_waiters.cancel(node);
  }

  mutable detail::spin_lock m_lock;
  bool m_set;
  detail::waiter_list m_waiters;
};

/// An event that releases one waiter per set(): set() resumes the oldest waiter, or,
/// with nobody waiting, leaves the event set so that the next wait completes at once
/// (and clears it). Several set() calls with nobody waiting count as one. Thread-safe.
/// Destroying it while waited on is a programming error.
class auto_reset_event {
 public:
  /// Starts set (one wait completes at once) when `initially_set`, else clear.
  explicit auto_reset_event(bool initially_set = false) noexcept : m_set(initially_set) {}
  auto_reset_event(const auto_reset_event&) = delete;
  auto_reset_event& operator=(const auto_reset_event&) = delete;

  /// Releases the oldest waiter, or sets the event if nobody waits. Thread-safe.
  void set() noexcept {
    detail::waiter* w;
    {
      std::lock_guard lock(m_lock);
      w = m_waiters.pop_front();
      if (w == nullptr) m_set = true;
    }
    if (w != nullptr) w->wake();
  }
  /// Clears the event. Thread-safe.
  void reset() noexcept {
    std::lock_guard lock(m_lock);
    m_set = false;
  }
  /// Takes the signal if the event is set (clearing it); true if it was. Thread-safe.
  bool try_wait() noexcept {
    std::lock_guard lock(m_lock);
    return std::exchange(m_set, false);
  }

  /// Awaiter of wait() (see detail::park_awaiter).
  using wait_awaiter = detail::park_awaiter<auto_reset_event>;

  /// `co_await ev.wait()`: takes the signal, waiting in FIFO order for a set().
  /// Throws weft::cancelled, the signal not taken, when the awaiting task's stop token
  /// is stopped while it waits (weft/stop.hpp).
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
    if (!node.begin_park() || std::exchange(m_set, false)) return false;
    m_waiters.push_back(&node);
    return true;
  }
  bool cancel_wait(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    return m_waiters.cancel(node);
  }

  detail::spin_lock m_lock;
  bool m_set;
  detail::waiter_list m_waiters;
};

}  // namespace weft
