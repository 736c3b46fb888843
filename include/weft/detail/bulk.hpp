// weft/detail/bulk.hpp: the engine under spawn_many, spawn_tuple and fork_group. Not API.
//
// spawn_many (weft/spawn_many.hpp) forks children 0..n-2 in one bulk push (every one is stealable
// before anything else runs: DESIGN's "publish first, then hold back" rule), runs child
// n-1 inline by symmetric transfer, then joins n-2..0 newest first, so that each join
// normally pops its own child back from the bottom of the deque and runs it inline with
// no atomic operation. Results stay in the children's frames; the caller collects them
// in index order afterwards, so the first (lowest-index) exception is the one rethrown,
// after every child finished.
#pragma once

#include <coroutine>
#include <cstddef>
#include <span>

#include "weft/detail/fork.hpp"
#include "weft/task.hpp"

namespace weft::detail {

/// Queues all `hs` as forked children at the caller's priority with one notification.
template <class Promise>
void fork_bulk(std::span<const std::coroutine_handle<Promise>> hs) {
  worker_context* w = t_worker;
  const unsigned prio = t_prio;
  if (w == nullptr || hs.size() > w->m_deques[prio].free_slots()) {
    for (auto h : hs) {
      h.promise().m_mode = completion::forked;
      enqueue_child(h.promise(), h, k_inherit_priority, nullptr);
    }
    return;
  }
  split_deque& d = w->m_deques[prio];
  void* previous = nullptr;  // children are joined newest first: i is joined right after i + 1
  for (auto h : hs) {
    promise_base& p = h.promise();
    p.m_mode = completion::forked;
    p.m_prio = static_cast<std::uint8_t>(prio);
    p.m_parent_prio = static_cast<std::uint8_t>(prio);
    p.m_next_join = previous;
    previous = h.address();
    d.push(h.address());
  }
  if (d.share_requested()) on_work_available(*w, d);
}

/// Runs awaited-mode task `h` inline, keeping its result in its frame.
template <class Promise>
struct run_inline_awaiter {
  std::coroutine_handle<Promise> m_h;
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> c) noexcept {
    m_h.promise().m_continuation = c;
    return m_h;
  }
  void await_resume() const noexcept {}
};

/// Rethrows the first (lowest-index) exception among finished tasks `ts`.
template <class Range>
void rethrow_first_error(const Range& ts) {
  for (const auto& t : ts)
    if (t.handle().promise().m_result.has_error()) std::rethrow_exception(t.handle().promise().m_result.error());
}

}  // namespace weft::detail
