// weft/barrier.hpp: weft::barrier, a reusable rendezvous of a fixed number of tasks or
// threads.
//
// Protocol: a short lock guards the count of arrivals in the current phase and the FIFO
// of those waiting; the last arrival of a phase takes every waiter, starts the next
// phase, and continues without suspending; the waiters resume (oldest first) after it
// released the lock.
#pragma once

#include <coroutine>
#include <cstddef>
#include <mutex>
#include <stdexcept>

#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"

namespace weft {

/// A barrier for `participants` parties, reusable phase after phase: each
/// arrive_and_wait() of a phase waits until all participants arrived. arrive_and_drop()
/// arrives and leaves for good (later phases need one participant less). Waiters resume
/// on the executor they suspended on. Thread-safe. Destroying it while waited on is a
/// programming error.
class barrier {
 public:
  /// Throws std::invalid_argument for 0 participants.
  explicit barrier(std::size_t participants) : m_expected(participants), m_left(participants) {
    if (participants == 0) throw std::invalid_argument("weft::barrier: participants must be at least 1 (got 0)");
  }
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;

  /// Awaiter of arrive_and_wait(): evaluates to the phase number it completed (0, 1, ...).
  /// Used once by that co_await, on the awaiting thread (the coroutine protocol; not
  /// thread-safe itself, the barrier is).
  class arrive_awaiter {
   public:
    /// Never ready: the arrival happens in await_suspend.
    bool await_ready() const noexcept { return false; }
    /// Arrives for the awaiting coroutine `h`: true when it waits for the rest of the
    /// phase, false (resume at once) when this arrival was the phase's last, or its stop
    /// token is stopped (no arrival then).
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_node.park(h);
      m_stop.arm(h, m_barrier, m_node, &detail::cancel_owner_wait<barrier>);
      return m_barrier->arrive(m_node, m_phase);
    }
    /// The number of the phase this arrival belonged to (completed by now). Throws
    /// weft::cancelled when the stop came first (the arrival was withdrawn).
    std::size_t await_resume() {
      if (m_stop.stopped(m_node)) throw cancelled();
      return m_phase;
    }

   private:
    friend class barrier;
    explicit arrive_awaiter(barrier& b) noexcept : m_barrier(&b) {}
    barrier* m_barrier;
    std::size_t m_phase = 0;
    detail::waiter m_node;
    detail::wait_stop m_stop;
  };

  /// `co_await b.arrive_and_wait()`: arrives and waits for the rest of this phase.
  /// When the awaiting task's stop token is stopped before the phase completes, the
  /// arrival is withdrawn (the phase still needs one) and it throws weft::cancelled
  /// (weft/stop.hpp).
  [[nodiscard]] arrive_awaiter arrive_and_wait() noexcept { return arrive_awaiter{*this}; }

  /// Blocking arrive_and_wait for plain threads; returns the phase number. Thread-safe.
  std::size_t arrive_and_wait_blocking() noexcept {
    detail::sync_signal signal;
    detail::waiter node;
    node.park(signal);
    std::size_t phase = 0;
    if (arrive(node, phase)) detail::block_on(signal);
    return phase;
  }

  /// Arrives for this phase and leaves the barrier for all later ones. Called at most
  /// once per participant (more calls than participants are undefined). Thread-safe.
  void arrive_and_drop() noexcept {
    detail::waiter* all = nullptr;
    {
      std::lock_guard lock(m_lock);
      --m_expected;
      if (--m_left == 0) all = next_phase_locked();
    }
    detail::wake_chain(all);
  }

  /// Phases completed so far. Thread-safe.
  std::size_t phase() const noexcept {
    std::lock_guard lock(m_lock);
    return m_phase;
  }

 private:
  /// Arrives with `node`; true when it must wait (it is not the last).
  bool arrive(detail::waiter& node, std::size_t& phase) noexcept {
    detail::waiter* all = nullptr;
    {
      std::lock_guard lock(m_lock);
      if (!node.begin_park()) return false;  // stopped first: no arrival
      phase = m_phase;
      if (--m_left != 0) {
        m_waiters.push_back(&node);
        return true;
      }
      all = next_phase_locked();
    }
    detail::wake_chain(all);
    return false;
  }
  template <class Owner>
  friend bool detail::cancel_owner_wait(void*, detail::waiter&) noexcept;
  /// The stop callback's step (detail/waiter.hpp): a withdrawn arrival counts again.
  bool cancel_wait(detail::waiter& node) noexcept {
    std::lock_guard lock(m_lock);
    if (!m_waiters.cancel(node)) return false;
    ++m_left;
    return true;
  }
  detail::waiter* next_phase_locked() noexcept {
    ++m_phase;
    m_left = m_expected;
    return m_waiters.take_all();
  }

  mutable detail::spin_lock m_lock;
  std::size_t m_expected;
  std::size_t m_left;
  std::size_t m_phase = 0;
  detail::waiter_list m_waiters;
};

}  // namespace weft
