// weft/spawn_tuple.hpp: run a fixed set of differently-typed tasks in parallel.
#pragma once

#include <array>
#include <coroutine>
#include <exception>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/detail/bulk.hpp"
#include "weft/detail/fork.hpp"
#include "weft/spawn.hpp"
#include "weft/task.hpp"

namespace weft {

namespace detail {

/// Makes the tuple_task spawn_tuple returns.
struct tuple_task_access;

/// A void task's slot in spawn_tuple's result.
template <class T>
using tuple_slot_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
tuple_slot_t<T> take_slot(task<T>& t) {
  if constexpr (std::is_void_v<T>) {
    detail::task_handle(t).promise().m_result.take();
    return {};
  } else {
    return detail::task_handle(t).promise().m_result.take();
  }
}

/// Evaluates to where the awaiting task's stop token is (null: none), without suspending.
struct own_stop_token {
  const std::stop_token* m_token = nullptr;
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    m_token = awaiting_token(h);
    return false;
  }
  const std::stop_token* await_resume() const noexcept { return m_token; }
};

template <class... Ts>
task<std::tuple<tuple_slot_t<Ts>...>> spawn_tuple_impl(task<Ts>... ts) {
  constexpr std::size_t n = sizeof...(Ts);
  // The children run under the token this task runs under (the awaiting task's).
  const std::stop_token* tok = co_await own_stop_token{};
  if (tok != nullptr) ((detail::task_handle(ts).promise().m_stop = tok), ...);
  // Children 0..n-2 are forked (one bulk publication), the last runs inline, then the
  // forked ones are joined newest first (see weft/detail/bulk.hpp).
  std::array<promise_base*, n> ps{&detail::task_handle(ts).promise()...};
  std::array<std::coroutine_handle<>, n> hs{std::coroutine_handle<>(detail::task_handle(ts))...};
  // Siblings differ in type, so no join chain (chain_next_join needs one promise type).
  fork_bulk(n - 1, [&](std::size_t i) { return std::pair{ps[i], hs[i]}; }, false);
  {
    auto& last = std::get<n - 1>(std::tie(ts...));
    co_await run_inline_awaiter<typename std::remove_reference_t<decltype(last)>::promise_type>{
        detail::task_handle(last)};
  }
  for (std::size_t i = n; i-- > 1;) co_await join_awaiter{*ps[i - 1], hs[i - 1]};
  std::exception_ptr first;
  ((first == nullptr && detail::task_handle(ts).promise().m_result.has_error()
        ? (void)(first = detail::task_handle(ts).promise().m_result.error())
        : void()),
   ...);
  if (first) std::rethrow_exception(first);
  co_return std::tuple<tuple_slot_t<Ts>...>{take_slot(ts)...};
}

}  // namespace detail

/// What spawn_tuple returns: the task that runs the tuple (await it, or hand it to
/// weft::spawn, like any task<R>), with run_on to run it on another executor. Single use;
/// not thread-safe (one owner).
template <class R>
class [[nodiscard]] tuple_task : public task<R> {
 public:
  /// `co_await weft::spawn_tuple(a(), b()).run_on(pool)`: the tasks are forked on `ex`
  /// (the tuple's task is spawned there, as weft::spawn(t).run_on(ex)); the caller
  /// resumes on its own executor. `.priority(p)` may follow.
  auto run_on(executor& ex) && { return spawn(static_cast<task<R>&&>(*this)).run_on(ex); }

 private:
  friend struct detail::tuple_task_access;
  explicit tuple_task(task<R>&& t) noexcept : task<R>(std::move(t)) {}
};

namespace detail {
struct tuple_task_access {
  /// The tuple_task that runs `t`.
  template <class R>
  static tuple_task<R> make(task<R>&& t) noexcept {
    return tuple_task<R>{std::move(t)};
  }
};
}  // namespace detail

/// Runs the tasks in parallel (all but the last queued where thieves can take them, the
/// last inline) and evaluates to std::tuple of their results (std::monostate for a void
/// task). The first (leftmost) exception is rethrown after every task finished.
/// Throws std::logic_error if a task is empty. Call from a weft task (on any executor);
/// the tasks run at once on that executor's threads, so anything they share must be
/// thread-safe. To run them on another executor: `co_await weft::spawn_tuple(a, b).run_on(pool)`
/// (the children are forked from `pool`; the caller resumes on its own executor).
template <class... Ts>
  requires(sizeof...(Ts) > 0)
tuple_task<std::tuple<detail::tuple_slot_t<Ts>...>> spawn_tuple(task<Ts>... ts) {
  if (!(ts.valid() && ...)) detail::throw_bad_await("weft::spawn_tuple: empty or moved-from task");
  return detail::tuple_task_access::make(detail::spawn_tuple_impl(std::move(ts)...));
}

}  // namespace weft
