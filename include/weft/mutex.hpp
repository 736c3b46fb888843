// weft/mutex.hpp: weft::mutex, an async mutex whose waiters suspend (tasks) or block
// (plain threads) and are served in FIFO order.
//
// Protocol: a short lock (detail::spin_lock) guards `locked` and the FIFO of waiters.
// unlock() with waiters hands the mutex straight to the oldest one (`locked` stays
// true), so a newcomer's try_lock cannot overtake a waiter and no wake-up is lost:
// a waiter is queued and the mutex seen locked under the same lock.
#pragma once

#include <coroutine>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"

namespace weft {

/// An async mutex: `auto guard = co_await m.lock();` suspends the task (not the
/// thread) while another holder has it. Not recursive. Waiters get it in FIFO order
/// and resume on the executor they suspended on. Thread-safe. Destroying it while it is
/// held or waited on is a programming error.
class mutex {
 public:
  /// Owns a lock of a weft::mutex and unlocks it when destroyed. Move-only; not
  /// thread-safe (one owner).
  class [[nodiscard]] scoped_lock {
   public:
    /// Holds no lock.
    scoped_lock() noexcept = default;
    /// Takes over the lock of `m`, which the caller holds (try_lock() succeeded).
    explicit scoped_lock(mutex& m, std::adopt_lock_t) noexcept : m_mutex(&m) {}
    /// Takes over `o`'s lock, if any; `o` is left holding none.
    scoped_lock(scoped_lock&& o) noexcept : m_mutex(std::exchange(o.m_mutex, nullptr)) {}
    /// Unlocks the lock this one holds, if any, then takes over `o`'s; `o` is left
    /// holding none.
    scoped_lock& operator=(scoped_lock&& o) noexcept {
      if (this != &o) {
        reset();
        m_mutex = std::exchange(o.m_mutex, nullptr);
      }
      return *this;
    }
    /// Unlocks the mutex if it holds a lock.
    ~scoped_lock() { reset(); }
    /// True while it holds a lock.
    bool owns_lock() const noexcept { return m_mutex != nullptr; }
    /// owns_lock().
    explicit operator bool() const noexcept { return owns_lock(); }
    /// Unlocks now (nothing if it holds no lock).
    void unlock() noexcept { reset(); }
    /// The mutex it holds, or nullptr.
    mutex* get() const noexcept { return m_mutex; }

   private:
    void reset() noexcept {
      if (mutex* m = std::exchange(m_mutex, nullptr)) m->unlock();
    }
    mutex* m_mutex = nullptr;
  };

  /// An unlocked mutex.
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  /// Locks if free, without waiting; true on success (then call unlock(), or adopt it
  /// into a scoped_lock). Fails while anyone holds or waits. Thread-safe.
  bool try_lock() noexcept {
    std::lock_guard lock(m_lock);
    if (m_locked) return false;
    m_locked = true;
    return true;
  }

  /// A scoped_lock owning the mutex if try_lock() succeeds, else an empty one.
  /// Thread-safe.
  scoped_lock try_lock_scoped() noexcept { return try_lock() ? scoped_lock{*this, std::adopt_lock} : scoped_lock{}; }

  /// Unlocks; the oldest waiter, if any, gets the mutex and resumes. Precondition: the
  /// caller holds it (any thread may release it: it is not owner-tracked). Thread-safe.
  void unlock() noexcept {
    detail::waiter* next = nullptr;
    {
      std::lock_guard lock(m_lock);
      next = m_waiters.pop_front();
      if (next == nullptr) m_locked = false;  // else: ownership passes to `next`
    }
    if (next != nullptr) next->wake();
  }

  /// Awaiter of lock().
  /// Used once by that co_await, on the awaiting thread (the coroutine protocol; not
  /// thread-safe itself, the mutex is).
  class lock_awaiter {
   public:
    /// Takes the mutex if it is free now (as try_lock()): true (no suspension) then.
    bool await_ready() noexcept { return m_mutex->try_lock(); }
    /// Queues the awaiting coroutine `h`: true. False (resume at once) when the mutex was
    /// free after all and was taken here, or its stop token is stopped.
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_node.park(h);
      m_stop.arm(h, m_mutex, m_node, &detail::cancel_owner_wait<mutex>);
      return m_mutex->park(m_node);
    }
    /// A scoped_lock owning the mutex (taken here, or handed over by unlock()). Throws
    /// weft::cancelled when the stop came first (the mutex was not taken).
    scoped_lock await_resume() {
      if (m_stop.stopped(m_node)) throw cancelled();
      return scoped_lock{*m_mutex, std::adopt_lock};
    }

   private:
    friend class mutex;
    explicit lock_awaiter(mutex& m) noexcept : m_mutex(&m) {}
    mutex* m_mutex;
    detail::waiter m_node;
    detail::wait_stop m_stop;
  };

  /// `auto guard = co_await m.lock();`: the mutex, waiting in FIFO order while it is
  /// held. Throws weft::cancelled, the mutex not taken, when the awaiting task's stop
  /// token is stopped while it waits (weft/stop.hpp). Thread-safe.
  [[nodiscard]] lock_awaiter lock() noexcept { return lock_awaiter{*this}; }

  /// Blocking lock for plain threads (on an executor's thread it blocks the worker).
  /// Thread-safe.
  scoped_lock lock_wait() noexcept {
    if (try_lock()) return scoped_lock{*this, std::adopt_lock};
    detail::sync_signal signal;
    detail::waiter node;
    node.park(signal);
    if (park(node)) detail::block_on(signal);
    return scoped_lock{*this, std::adopt_lock};
  }

 private:
  /// Queues `node` unless the mutex is free now (then takes it): true when it waits.
  template <class Owner>
  friend bool detail::cancel_owner_wait(void*, detail::waiter&) noexcept;
  bool park(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    if (!node.begin_park()) return false;
    if (!m_locked) {
      m_locked = true;
      return false;
    }
    m_waiters.push_back(&node);
    return true;
  }
  /// The stop callback's step for a waiter (detail/waiter.hpp).
  bool cancel_wait(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    return m_waiters.cancel(node);
  }

  detail::spin_lock m_lock;
  bool m_locked = false;
  detail::waiter_list m_waiters;
};

}  // namespace weft
