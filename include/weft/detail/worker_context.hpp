// weft/detail/worker_context.hpp: the part of a pool worker that inline fast paths
// (fork, join, task completion) need. Not API. The worker loop itself lives in
// src/worker.cpp; stealing in src/stealing.cpp; parking in src/idle.cpp.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>

#include "weft/config.hpp"
#include "weft/detail/split_deque.hpp"
#include "weft/executor.hpp"

namespace weft::detail {

/// The pool's idle state word: sleepers in the low half, searching workers in the high.
inline constexpr std::uint64_t k_searching_one = std::uint64_t{1} << 32;
inline constexpr std::uint64_t k_sleepers_mask = k_searching_one - 1;

struct worker_context {
  split_deque* m_deques = nullptr;  // one per priority level, [0, m_prios)
  unsigned m_prios = 0;
  unsigned m_index = 0;
  executor* m_executor = nullptr;  // the owning pool
  // Joins of children at a priority >= this take the slow path, which first runs any
  // higher-priority work that was announced. Normally m_prios; a post from outside at
  // priority u lowers it to u + 1 on every worker (src/pool.cpp), and the worker resets
  // it when it looks for that work (take_urgent, find_work). Written by other threads
  // only on such posts, so the cache line stays the owner's in steady state.
  std::atomic<unsigned> m_inline_limit{0};
};

/// Slow path of a join that found m_inline_limit lowered (src/worker.cpp): resets it
/// and returns the highest-priority work at a priority < `below` that is queued in this
/// worker's inbox or can be stolen (setting t_prio to its priority), or nullptr.
void* take_urgent(worker_context& w, unsigned below) noexcept;

/// Slow path after a push or pop (src/worker.cpp): share work with thieves that asked
/// or with parked workers, and wake one when nobody is searching.
/// `plain`: the newest item is not a forked child (see push_local).
void on_work_available(worker_context& w, split_deque& d, bool plain = false) noexcept;
/// The deque is full: queue `item` in the worker's inbox instead (src/worker.cpp).
void push_overflow(worker_context& w, unsigned prio, void* item);

/// Owner: push ready work (a coroutine frame address) at priority prio. The only
/// shared-memory read is the deque's share request, which both searching thieves and
/// workers about to park raise (so the push path needs no look at the idle state).
/// A request stays pending while sharing is not worth it (split_deque::worth_sharing:
/// a lone item without lone credit), and is answered at the first push that makes it so.
/// `plain`: the item is not a forked child about to be joined (a task woken by a
/// channel, an event or an I/O completion, a task that yields); its pusher goes on
/// running, so a waiting thief gets it at once, never as a lone item.
WEFT_INLINE void push_local(worker_context& w, unsigned prio, void* item, bool plain = false) {
  split_deque& d = w.m_deques[prio];
  if (!d.push(item)) [[unlikely]] {
    push_overflow(w, prio, item);
    return;
  }
  if (d.share_requested()) [[unlikely]]
    if (plain || d.worth_sharing()) on_work_available(w, d, plain);
}

/// On a pool worker, for a task that this worker is about to resume inline although it
/// has more ready work of its own to run after it (the next completions of its I/O
/// ring): when a thief asked this worker to share (an idle worker: searching, or
/// parked), queues `h` at `prio` as shared work instead, and wakes a worker to take it
/// if none is searching. True when queued, false (nothing done) otherwise: not on a
/// worker of `home`, or nobody asked. This is what spreads tasks woken by one worker's
/// own events over the idle workers; a task nobody takes is run by its owner later.
WEFT_INLINE bool offer_to_thief(executor* home, unsigned prio, std::coroutine_handle<> h) {
  worker_context* w = t_worker;
  if (w == nullptr || w->m_executor != home || prio >= w->m_prios) return false;
  if (!w->m_deques[prio].share_requested()) [[likely]]
    return false;
  push_local(*w, prio, h.address(), true);
  return true;
}

/// Owner: pop the newest work at priority prio, or nullptr.
WEFT_INLINE void* pop_local(worker_context& w, unsigned prio) noexcept {
  split_deque& d = w.m_deques[prio];
  void* item = d.pop();
  if (d.share_requested()) [[unlikely]]
    if (d.worth_sharing()) on_work_available(w, d);
  return item;
}

/// The next ready work this thread should run without going back to its loop: the
/// highest-priority item of its own deques (the "next task" rule), else a no-op
/// handle (back to the worker loop).
WEFT_INLINE std::coroutine_handle<> take_local() noexcept {
  if (worker_context* w = t_worker) {
    // Higher-priority work was posted from outside: the worker loop takes work in
    // priority order, inboxes included.
    if (w->m_inline_limit.load(std::memory_order_relaxed) < w->m_prios) [[unlikely]]
      return std::noop_coroutine();
    for (unsigned p = 0; p < w->m_prios; ++p) {
      if (void* item = pop_local(*w, p)) {
        t_prio = p;
        return std::coroutine_handle<>::from_address(item);
      }
    }
  }
  return std::noop_coroutine();
}

}  // namespace weft::detail
