// weft/detail/fork.hpp: queueing a forked task and joining it. Not API.
//
// Join protocol of a forked child (promise_base::m_join):
// * The parent forks: the child is pushed on the current worker's deque (or scheduled
//   on another executor) with m_mode = forked.
// * Fast path: the parent joins while the child is still the newest item of its own
//   deque. It pops it back (no other thread can have it), switches it to awaited mode,
//   sets m_continuation, and transfers into it; the child's final_suspend transfers
//   straight back. No atomic read-modify-write anywhere.
// * Otherwise the child was taken by someone else (a thief or the worker loop). The
//   parent CASes its own frame address into m_join (0 -> parent); the child's
//   completion exchanges m_join to k_join_done and resumes whatever parent it found.
//   Whoever comes second proceeds: the parent (CAS failed: already done) resumes at
//   once; the child (found a parent) resumes it by symmetric transfer on its own thread.
// * While waiting, the parent's thread keeps running its own newest work (the item it
//   popped instead of the child) without returning to the worker loop.
#pragma once

#include <coroutine>
#include <cstdint>

#include "weft/config.hpp"
#include "weft/detail/worker_context.hpp"
#include "weft/executor.hpp"
#include "weft/task.hpp"

namespace weft {
class thread_pool;
thread_pool& default_pool();
}  // namespace weft

namespace weft::detail {

inline constexpr unsigned k_inherit_priority = ~0u;

/// Schedules a forked/detached child on `target` (not the current worker's deque).
void schedule_elsewhere(executor* target, std::coroutine_handle<> h, unsigned prio);
/// Executor used when forking from a thread that is not running on any executor.
executor& fallback_executor();

/// Queues child `h` (mode already set) at `prio` (k_inherit_priority: the caller's).
/// `target`: the executor asked for with run_on(), or nullptr for "where I run".
WEFT_INLINE void enqueue_child(promise_base& p, std::coroutine_handle<> h, unsigned prio, executor* target) {
  // Reachable from a fiber's plain code (spawn(...).fork()): fiber-safe TLS reads.
  const unsigned parent_prio = fiber_safe_prio();  // the parent resumes at its own priority
  p.m_parent_prio = static_cast<std::uint8_t>(parent_prio);
  worker_context* w = fiber_safe_worker();
  if (target == nullptr || (w != nullptr && target == w->m_executor)) [[likely]] {
    if (w != nullptr) [[likely]] {
      if (prio == k_inherit_priority)
        prio = parent_prio;
      else if (prio >= w->m_prios) [[unlikely]]
        check_priority(*w->m_executor, prio, "weft::spawn");
      p.m_prio = static_cast<std::uint8_t>(prio);
      push_local(*w, prio, h.address());
      return;
    }
    executor* const here = fiber_safe_executor();
    target = here != nullptr ? here : &fallback_executor();
  } else {
    p.m_home = fiber_safe_executor();  // resume the parent where it runs now
  }
  if (prio == k_inherit_priority) prio = parent_prio < target->priorities() ? parent_prio : 0;
  p.m_prio = static_cast<std::uint8_t>(prio);
  schedule_elsewhere(target, h, prio);
}

/// Awaiter that waits for a forked child to finish (its result stays in its frame).
/// Only promise_base is used, so children of any type can be joined.
struct join_awaiter {
  promise_base* m_p = nullptr;
  std::coroutine_handle<> m_h;

  join_awaiter() noexcept = default;
  template <class Promise>
  join_awaiter(std::coroutine_handle<Promise> h) noexcept : m_p(&h.promise()), m_h(h) {}  // NOLINT: implicit on purpose
  join_awaiter(promise_base& p, std::coroutine_handle<> h) noexcept : m_p(&p), m_h(h) {}

  bool await_ready() const noexcept {
    return m_p->m_join.load(std::memory_order_acquire) == k_join_done;  // pairs with complete_queued
  }

  WEFT_INLINE std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
    promise_base& p = *m_p;
    worker_context* w = t_worker;
    void* other = nullptr;
    if (w != nullptr && p.m_home == nullptr && p.m_prio < w->m_inline_limit.load(std::memory_order_relaxed))
        [[likely]] {
      other = w->m_deques[p.m_prio].pop();  // share requests are answered at the next push
      // Same priority as the parent: run it inline at the parent's priority.
      if (other == m_h.address() && p.m_prio == p.m_parent_prio) [[likely]] {
        p.m_mode = completion::awaited;  // exclusively ours now: finish like a plain co_await
        p.m_continuation = parent;
        return m_h;
      }
      return register_waiter(parent, other);
    }
    return slow_suspend(parent);
  }

  /// A join that did not take the fast path: another executor's child, or higher-
  /// priority work was announced (worker_context::m_inline_limit). In the second case
  /// the parent waits for its child through m_join as if the child had been stolen
  /// (the child stays queued), and the thread runs the urgent work now.
  WEFT_NOINLINE std::coroutine_handle<> slow_suspend(std::coroutine_handle<> parent) noexcept {
    promise_base& p = *m_p;
    worker_context* w = t_worker;
    if (w == nullptr || p.m_home != nullptr || p.m_prio >= w->m_prios) return register_waiter(parent, nullptr);
    const unsigned parent_prio = t_prio;
    if (void* urgent = take_urgent(*w, p.m_prio)) {
      std::uintptr_t expected = k_join_none;
      // As in register_waiter: release publishes the parent's state, acquire the result.
      if (!p.m_join.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(parent.address()),
                                            std::memory_order_acq_rel, std::memory_order_acquire))
        push_local(*w, parent_prio, parent.address());       // child already done: resume later
      return std::coroutine_handle<>::from_address(urgent);  // take_urgent set t_prio
    }
    void* other = w->m_deques[p.m_prio].pop();
    if (other == m_h.address() && p.m_prio == p.m_parent_prio) {
      p.m_mode = completion::awaited;
      p.m_continuation = parent;
      return m_h;
    }
    return register_waiter(parent, other);
  }

  WEFT_NOINLINE std::coroutine_handle<> register_waiter(std::coroutine_handle<> parent, void* other) noexcept {
    promise_base& p = *m_p;
    // Read before the CAS: once it publishes the parent, the child may finish and resume
    // the parent on another thread, which frees the child's frame.
    const unsigned prio = p.m_prio;
    std::uintptr_t expected = k_join_none;
    // release: the parent's state before suspending is visible to whoever resumes it;
    // acquire (failure): the child's result (pairs with complete_queued's exchange).
    if (!p.m_join.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(parent.address()),
                                          std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (other != nullptr) push_local(*t_worker, prio, other);  // give it back
      return parent;                                             // child already done
    }
    if (other != nullptr) {
      t_prio = prio;
      return std::coroutine_handle<>::from_address(other);  // our own newest work (maybe the child)
    }
    return take_local();
  }

  void await_resume() const noexcept {}
};

/// Abandons forked child `h`: it frees itself when it finishes (or now, if it has).
template <class Promise>
void abandon_child(std::coroutine_handle<Promise> h) noexcept {
  if (h.promise().m_join.exchange(k_join_abandoned, std::memory_order_acq_rel) == k_join_done) h.destroy();
}

}  // namespace weft::detail
