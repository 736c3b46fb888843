// weft/spawn_many.hpp: run many tasks in parallel and collect their results.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <ranges>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/bounded_vector.hpp"
#include "weft/detail/bulk.hpp"
#include "weft/spawn.hpp"
#include "weft/task.hpp"

namespace weft {

namespace detail {

template <class R>
using range_task_t = std::remove_cvref_t<std::ranges::range_value_t<R>>;

/// What spawn_many returns: owns the tasks (a std::vector or std::array, `Storage`)
/// until the awaiting coroutine has taken their results. `co_await` forks children
/// 0..n-2 in one bulk push, runs n-1 inline, and resumes the awaiting coroutine once
/// every child finished (weft/detail/bulk.hpp). Awaited at most once; move-only; not
/// thread-safe (the awaiting coroutine's temporary).
template <class T, class Storage>
class [[nodiscard]] bulk_join_op {
 public:
  explicit bulk_join_op(Storage ts) noexcept { std::construct_at(&m_ts, std::move(ts)); }
  /// Makes the tasks in place: fill(m_ts) (no move of the storage afterwards).
  template <class Fill>
  bulk_join_op(std::in_place_t, Fill&& fill) {
    std::construct_at(&m_ts);
    try {
      fill(m_ts);
    } catch (...) {
      std::destroy_at(&m_ts);
      throw;
    }
  }
  bulk_join_op(bulk_join_op&& o) noexcept : m_joined(std::exchange(o.m_joined, false)) {
    std::construct_at(&m_ts, std::move(o.m_ts));
  }
  bulk_join_op& operator=(bulk_join_op&&) = delete;
  /// Frees the children's frames: at once where it can after a join that threw nothing
  /// (release_joined_frames; then an array of tasks is left undestroyed, as destroying
  /// it would only free the frames again), else one by one (the tasks' destructors).
  WEFT_INLINE ~bulk_join_op() {
    if (m_joined && release_joined_frames<T>(m_ts)) {
      if constexpr (!std::is_same_v<Storage, std::vector<task<T>>>) {
        return;
      } else {
        for (auto& t : m_ts) (void)detail::release_task(t);  // the vector's buffer still goes
      }
    }
    std::destroy_at(&m_ts);
  }

  /// The same fan-out run on `ex` (CPU work started from an I/O thread goes to a
  /// pool): a task that awaits this op is forked onto `ex` as weft::spawn(...).run_on(ex)
  /// does, its children are forked from there, and the awaiting task resumes on its own
  /// executor once every child finished. Evaluates to what `co_await` on this op does;
  /// `.priority(p)` may follow. `co_await weft::spawn_many(tasks).run_on(pool)`
  auto run_on(executor& ex) && { return spawn(await_bulk(std::move(*this))).run_on(ex); }

  /// Checks the tasks (std::logic_error for an empty one, before anything runs); ready
  /// at once when there are none.
  bool await_ready() const {
    for (const auto& t : m_ts)
      if (!t.valid()) [[unlikely]]
        throw_bad_await("weft::spawn_many: empty or moved-from task");
    return m_ts.size() == 0;
  }

  /// Queues children 0..n-2 and transfers into child n-1, on this thread. The children
  /// run under the awaiting task's stop token (weft/stop.hpp), if it has one.
  template <class Awaiting>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Awaiting> awaiting) {
    using promise = typename task<T>::promise_type;
    const std::size_t n = m_ts.size();
    if (const std::stop_token* tok = awaiting_token(awaiting)) [[unlikely]]
      for (auto& t : m_ts) detail::task_handle(t).promise().m_stop = tok;
    promise& last = detail::task_handle(m_ts[n - 1]).promise();
    if (n > 1) {
      const auto child = [&](std::size_t i) {
        return std::pair<promise_base*, std::coroutine_handle<>>{&detail::task_handle(m_ts[i]).promise(),
                                                                 detail::task_handle(m_ts[i])};
      };
      fork_bulk(n - 1, child, true);
      // The inline child chains into its queued siblings, which share one priority.
      last.m_prio = static_cast<std::uint8_t>(t_prio);
      last.m_next_join = detail::task_handle(m_ts[n - 2]).address();
    }
    last.m_continuation = awaiting;
    return detail::task_handle(m_ts[n - 1]);
  }

  /// The results in input order, or the lowest-index exception.
  auto await_resume() {
    if (std::size(m_ts) == 0) return decltype(collect<T>(m_ts))();  // nothing ran, nothing to free
    m_joined = true;
    try {
      return collect<T>(m_ts);  // constructed in place
    } catch (...) {
      m_joined = false;  // a child's exception is on its way: its frame needs destroy()
      throw;
    }
  }

 private:
  union {
    Storage m_ts;  // constructed in the constructors, destroyed (or not) in the destructor
  };
  bool m_joined = false;  // awaited, and every child's result taken without an exception
};

/// A task that awaits bulk_join_op `op` (run_on's child).
template <class T, class Storage>
auto await_bulk(bulk_join_op<T, Storage> op) -> task<decltype(op.await_resume())> {
  if constexpr (std::is_void_v<decltype(op.await_resume())>) {
    co_await std::move(op);
  } else {
    co_return co_await std::move(op);
  }
}

}  // namespace detail

/// Runs every task of `r` in parallel (N-1 queued where thieves can take them, the last
/// one inline) and evaluates to their results in input order: std::vector<T> (nothing
/// for T = void). The tasks are moved out of `r`. The first (lowest-index) exception is
/// rethrown after all tasks finished. An empty range gives an empty vector.
/// Throws std::logic_error if an element is an empty task. Call from a weft task (on
/// any executor); the tasks run at once on that executor's threads, so anything they
/// share must be thread-safe (`.run_on(ex)` runs them on another executor instead). The
/// range itself is read on the calling thread.
/// Returns an awaitable, not a task: co_await it (or weft::await it in a fiber) in the
/// expression that made it; to hand it to spawn/post/sync_wait, wrap it in a task.
template <std::ranges::input_range R>
  requires detail::is_task<detail::range_task_t<R>>::value
auto spawn_many(R&& r) {
  using T = typename detail::range_task_t<R>::value_type;
  if constexpr (std::is_same_v<std::remove_cvref_t<R>, std::vector<task<T>>> && !std::is_lvalue_reference_v<R>) {
    return detail::bulk_join_op<T, std::vector<task<T>>>(std::move(r));
  } else {
    std::vector<task<T>> ts;
    if constexpr (std::ranges::sized_range<R>) ts.reserve(std::ranges::size(r));
    for (auto&& t : r) ts.push_back(std::move(t));
    return detail::bulk_join_op<T, std::vector<task<T>>>(std::move(ts));
  }
}

/// std::array overload: evaluates to std::array<T, N> (no heap allocation). Same
/// contract as the range form.
template <class T, std::size_t N>
auto spawn_many(std::array<task<T>, N>&& ts) {
  return detail::bulk_join_op<T, std::array<task<T>, N>>(std::move(ts));
}

/// Iterator-pair overload: the tasks in [first, last), moved from. Same contract as
/// the range form.
template <std::input_iterator It, std::sentinel_for<It> S>
auto spawn_many(It first, S last) {
  return spawn_many(std::ranges::subrange(first, last));
}

/// Iterator + count overload: the `count` tasks starting at `first`, moved from. Same
/// contract as the range form.
template <std::input_iterator It>
auto spawn_many(It first, std::size_t count) {
  return spawn_many(std::ranges::subrange(std::counted_iterator(first, static_cast<std::iter_difference_t<It>>(count)),
                                          std::default_sentinel));
}

/// Fixed-count overload: the N tasks starting at `first`, moved from, into a std::array.
/// Same contract as the range form.
template <std::size_t N, std::input_iterator It>
auto spawn_many(It first) {
  using T = typename std::remove_cvref_t<std::iter_value_t<It>>::value_type;
  std::array<task<T>, N> ts;
  for (std::size_t i = 0; i < N; ++i, ++first) ts[i] = std::move(*first);
  return detail::bulk_join_op<T, std::array<task<T>, N>>(std::move(ts));
}

/// Generator overload: the N tasks gen(0), gen(1), ..., gen(N - 1) (std::invoke, called
/// in index order on the calling thread), into a std::array<T, N>. Same contract as the
/// range form; if gen throws, the tasks made so far are destroyed unstarted and the
/// exception propagates from here. With clang, making the children inside `gen` (a
/// lambda) rather than in the caller's own body lets the children's frame set-up be
/// inlined (fewer instructions: bench/README.md, on skynet).
/// `co_await weft::spawn_many<10>([&](std::size_t i) { return child(i); })`
template <std::size_t N, class F>
  requires std::invocable<F&, std::size_t> && detail::is_task<std::invoke_result_t<F&, std::size_t>>::value
auto spawn_many(F&& gen) {
  using T = typename std::invoke_result_t<F&, std::size_t>::value_type;
  std::array<task<T>, N> ts;
  for (std::size_t i = 0; i < N; ++i) ts[i] = std::invoke(gen, i);
  return detail::bulk_join_op<T, std::array<task<T>, N>>(std::move(ts));
}

/// Count + generator overload: the n tasks gen(0), ..., gen(n - 1), into a
/// std::vector<T>. As the fixed-count generator form otherwise.
template <class F>
  requires std::invocable<F&, std::size_t> && detail::is_task<std::invoke_result_t<F&, std::size_t>>::value
auto spawn_many(std::size_t n, F&& gen) {
  using T = typename std::invoke_result_t<F&, std::size_t>::value_type;
  std::vector<task<T>> ts;
  ts.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ts.push_back(std::invoke(gen, i));
  return detail::bulk_join_op<T, std::vector<task<T>>>(std::move(ts));
}

/// Bounded count + generator overload: the n tasks gen(0), ..., gen(n - 1), n <= N,
/// into a weft::bounded_vector<T, N> (no heap allocation: for a count known only at
/// run time but bounded, as the children of a search node). Throws std::length_error
/// when n > N (no task made). Otherwise as the fixed-count generator form.
/// `co_await weft::spawn_many<14>(k, [&](std::size_t i) { return child(i); })`
template <std::size_t N, class F>
  requires std::invocable<F&, std::size_t> && detail::is_task<std::invoke_result_t<F&, std::size_t>>::value
auto spawn_many(std::size_t n, F&& gen) {
  using T = typename std::invoke_result_t<F&, std::size_t>::value_type;
  if (n > N) [[unlikely]]
    throw std::length_error("weft::spawn_many<N>(n, gen): n is greater than N");
  return detail::bulk_join_op<T, bounded_vector<task<T>, N>>(std::in_place, [&](bounded_vector<task<T>, N>& ts) {
    for (std::size_t i = 0; i < n; ++i) ts.emplace_back(std::invoke(gen, i));
  });
}

}  // namespace weft
