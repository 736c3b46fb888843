// weft/detail/bulk.hpp: the engine under spawn_many, spawn_tuple and fork_group. Not API.
//
// spawn_many (weft/spawn_many.hpp) forks children 0..n-2 in one bulk push (every one is stealable
// before anything else runs: CONTRIBUTING.md, 'Publish first, then hold back'), runs child
// n-1 inline by symmetric transfer, then joins n-2..0 newest first. The joins need no
// coroutine of their own: each child links to the sibling joined after it (m_next_join)
// and a child that finishes goes on down that chain itself (weft/task.hpp:
// chain_next_join, join_rest, complete_queued): the next sibling is normally the newest
// item of the deque, popped back and run inline with no atomic operation; a stolen one
// gets the awaiting coroutine registered in its m_join, and whoever finishes it goes on
// with the chain. The awaiting coroutine resumes once, when the last sibling is done.
// Results stay in the children's frames; the caller collects them in index order
// afterwards, so the first (lowest-index) exception is the one rethrown, after every
// child finished.
// Then the children's frames go: where nothing left in them needs a destructor and they
// are the top of this thread's frame stack (the usual case on a thread that ran them
// all), in one step (release_joined_frames), else one destroy() each.
#pragma once

#include <array>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/bounded_vector.hpp"
#include "weft/detail/fork.hpp"
#include "weft/detail/frame_allocator.hpp"
#include "weft/task.hpp"

namespace weft::detail {

/// Queues children 0..n-1 as forked children at the caller's priority with one
/// notification. `at(i)` gives child i as {promise_base*, coroutine handle}, so that
/// children of different types (spawn_tuple) go through here too. With `chain`, each
/// child records the sibling joined right after it (same promise type required: see
/// chain_next_join in weft/task.hpp).
template <class At>
void fork_bulk(std::size_t n, At at, bool chain) {
  worker_context* w = t_worker;
  const unsigned prio = t_prio;
  if (w == nullptr || n > w->m_deques[prio].free_slots()) {
    void* previous = nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      auto [p, h] = at(i);
      p->m_mode = completion::forked;
      if (chain) p->m_next_join = previous;
      previous = h.address();
      enqueue_child(*p, h, k_inherit_priority, nullptr);
    }
    return;
  }
  split_deque& d = w->m_deques[prio];
  void** const base = d.put_base();
  void* previous = nullptr;  // children are joined newest first: i is joined right after i + 1
  for (std::size_t i = 0; i < n; ++i) {
    auto [p, h] = at(i);
    p->m_mode = completion::forked;
    p->m_prio = static_cast<std::uint8_t>(prio);
    p->m_parent_prio = static_cast<std::uint8_t>(prio);
    if (chain) p->m_next_join = previous;
    previous = h.address();
    split_deque::put(base, i, h.address());  // room checked above
  }
  d.commit(static_cast<std::uint32_t>(n));
  if (n > 0 && d.share_requested() && d.worth_sharing()) on_work_available(*w, d);
}

/// Frees the frames of joined tasks `ts` (all finished, results taken, no exception) in
/// one step, without a destroy() call each, where that is all destroy() would do: the
/// result needs no destructor (k_plain_result<T>), nor do the parameters (each promise's
/// m_plain_params; nothing else is left in a frame at its final suspend point), and the
/// frames are the top of this thread's frame stack, ts[n-1] on top and each right below
/// the next with nothing in between (checked through the frames' footers, so a frame
/// made between two children, a parent resumed on another thread than its children's,
/// or a frame from the free lists all fail the check). Then the stack top goes down to
/// ts[0]'s start and it returns true: the frames are gone, the tasks must not destroy
/// them again. Otherwise it returns false, nothing changed, and the tasks' destructors
/// free the frames one by one.
template <class T, class Range>
WEFT_INLINE bool release_joined_frames(Range& ts) noexcept {
  if constexpr (!WEFT_SANITIZED && k_plain_result<T>) {
    const std::size_t n = std::size(ts);
    if (n == 0) return false;
    frame_stack& s = t_frame_cache.m_stack;
    std::uintptr_t top = s.m_top;
    for (std::size_t i = n; i-- > 0;) {
      const auto h = detail::task_handle(ts[i]);
      if (!h.promise().m_plain_params) return false;
      const auto start = reinterpret_cast<std::uintptr_t>(h.address());
      if (!frame_ends_at(start, top)) return false;
      top = start;
    }
    return frame_stack_cut(s, top);
  } else {
    return false;
  }
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
    if (detail::task_handle(t).promise().m_result.has_error())
      std::rethrow_exception(detail::task_handle(t).promise().m_result.error());
}

/// The results of finished tasks `ts` in order (nothing for void), or the first
/// (lowest-index) exception: std::vector for a vector of tasks, std::array for an
/// array. take() rethrows, so taking in index order rethrows the lowest-index one.
template <class T>
auto collect(std::vector<task<T>>& ts) {
  if constexpr (std::is_void_v<T>) {
    rethrow_first_error(ts);
  } else {
    std::vector<T> out;
    out.reserve(ts.size());
    for (auto& t : ts) out.push_back(detail::task_handle(t).promise().m_result.take());
    return out;
  }
}

template <class T, std::size_t N>
auto collect(std::array<task<T>, N>& ts) {
  if constexpr (std::is_void_v<T>) {
    rethrow_first_error(ts);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<T, N>{detail::task_handle(ts[I]).promise().m_result.take()...};  // in order
    }(std::make_index_sequence<N>{});
  }
}

template <class T, std::size_t N>
  requires std::is_void_v<T>
void collect(bounded_vector<task<T>, N>& ts) {
  rethrow_first_error(ts);
}

template <class T, std::size_t N>
  requires(!std::is_void_v<T>)
bounded_vector<T, N> collect(bounded_vector<task<T>, N>& ts) {
  bounded_vector<T, N> out;  // one return statement: constructed in the caller's object
  for (auto& t : ts) out.emplace_back(detail::task_handle(t).promise().m_result.take());  // in order
  return out;
}

}  // namespace weft::detail
