// weft/timeout.hpp: weft::with_timeout and weft::with_deadline, a time limit for any
// task or awaitable, on the stop model of weft/stop.hpp.
//
//   auto r = co_await weft::with_timeout(handle_request(conn), 2s);
//   if (r.ec == std::errc::timed_out) ...   // r.value: what the task returned anyway, if anything
//
// The task runs inline (as `co_await t` would run it) under a token of its own, linked
// to the caller's; when the deadline passes, that token is stopped, and everything the
// task waits in ends early (every weft wait watches its token: the io_uring and Asio
// operations of weft::io, channel push/pull, locks, events; weft/stop.hpp), so the
// task returns soon after. with_timeout waits for it to return: nothing it started
// outlives the call, and it may use the caller's locals. A wait that has no "nothing"
// result throws weft::cancelled (a mutex lock, say); when the deadline caused it,
// with_timeout catches it and reports std::errc::timed_out with no value. Something
// that watches no token (a blocking call, a spin) is not cut short: the task then
// returns when it ends. On an io_pool worker the deadline is kept by that worker's
// ring (checked as it polls, bounding its parked wait: no lock shared with other
// workers, no allocation per call); elsewhere by one process-wide timer thread, which
// also fires a worker's deadline that the worker leaves overdue by more than
// 5 milliseconds, busy in a task that does not await (weft/detail/timer.hpp). For a
// single io_uring operation, weft::io::with_timeout
// (weft/io/tcp.hpp) is cheaper: an io_uring linked timeout, no thread involved. That
// one yields the operation's own result, not a timeout_result: where both namespaces
// are imported an unqualified with_timeout(op, d) is ambiguous, so name the one meant.
#pragma once

#include <chrono>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <utility>

#include "weft/detail/timer.hpp"
#include "weft/stop.hpp"
#include "weft/task.hpp"

namespace weft {

/// What with_timeout / with_deadline evaluate to: `ec` is std::errc::timed_out when the
/// deadline passed before the task returned (its token was then stopped), else empty;
/// `value` is what the task returned (also after a timeout, when it still returned one).
/// A plain value.
template <class T>
struct timeout_result {
  std::error_code ec;      ///< std::errc::timed_out, or empty
  std::optional<T> value;  ///< the task's value, when it returned one
};

/// timeout_result for a task that returns nothing: `ec` only.
template <>
struct timeout_result<void> {
  std::error_code ec;  ///< std::errc::timed_out, or empty
};

namespace detail {

/// The timer's function: stops the source in m_arg.
inline void stop_source_at_deadline(timer_entry& e) noexcept {
  static_cast<std::stop_source*>(e.m_arg)->request_stop();
}

template <class T>
task<timeout_result<T>> deadline_task(task<T> t, std::chrono::steady_clock::time_point deadline) {
  if (!t.valid()) throw_bad_await("weft::with_timeout: empty or moved-from task");
  const std::stop_token parent = co_await this_task::stop_token();
  std::stop_source source;
  std::optional<std::stop_callback<stop_forward>> link;
  if (parent.stop_possible()) link.emplace(parent, stop_forward{&source});
  const std::stop_token token = source.get_token();
  timer_entry entry;
  entry.m_when = deadline;
  entry.m_fn = &stop_source_at_deadline;
  entry.m_arg = &source;
  timer_add(entry);
  struct disarm {  // also when the task threw: the entry lives in this frame
    timer_entry& e;
    ~disarm() { timer_remove(e); }
  } guard{entry};
  timeout_result<T> r;
  std::exception_ptr stopped;  // weft::cancelled: a wait cut short by a stop
  try {
    if constexpr (std::is_void_v<T>) {
      co_await run_under_token<typename task<T>::promise_type>{detail::task_handle(t), &token};
    } else {
      r.value.emplace(co_await run_under_token<typename task<T>::promise_type>{detail::task_handle(t), &token});
    }
  } catch (const cancelled&) {
    stopped = std::current_exception();
  }
  timer_remove(entry);  // before reading m_fired (the guard's second call finds nothing)
  // A wait cut short by the deadline is the timeout; by the caller's own stop (or
  // anything else), the exception goes on.
  if (stopped && !(entry.m_fired && !parent.stop_requested())) std::rethrow_exception(stopped);
  if (entry.m_fired) r.ec = std::make_error_code(std::errc::timed_out);
  co_return r;
}

template <class A>
auto as_task(A a) -> task<std::remove_cvref_t<decltype(std::declval<A&&>().await_resume())>> {
  co_return co_await std::move(a);
}

}  // namespace detail

/// `co_await weft::with_deadline(t, when)`: runs task `t` (inline, as `co_await t`)
/// until it returns; if `when` (std::chrono::steady_clock) passes first, stops the
/// token `t` runs under (see the file comment) and still waits for `t` to return.
/// Evaluates to timeout_result<T>; `t`'s exception is rethrown (also after a timeout),
/// except weft::cancelled caused by the deadline, which becomes the timeout (no value).
/// `t` runs under a token of its own that the caller's token also stops. Call from a
/// weft task. Throws std::logic_error for an empty task, std::system_error when the
/// timer thread cannot be started.
template <class T, class Duration>
task<timeout_result<T>> with_deadline(task<T> t, std::chrono::time_point<std::chrono::steady_clock, Duration> when) {
  return detail::deadline_task(std::move(t), std::chrono::time_point_cast<std::chrono::steady_clock::duration>(when));
}

/// with_deadline(t, now + d). `co_await weft::with_timeout(serve(conn), 30s)`
template <class T, class Rep, class Period>
task<timeout_result<T>> with_timeout(task<T> t, std::chrono::duration<Rep, Period> d) {
  return detail::deadline_task(std::move(t), std::chrono::steady_clock::now() +
                                                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(d));
}

/// with_deadline for any awaitable with await_resume (a weft::io operation such as
/// `listener.accept()` or `conn.write_all(...)`, a spawn_many...): awaited inside a task
/// that runs under the deadline's token. Evaluates to timeout_result of what it yields.
template <class A, class Duration>
  requires(!detail::is_task<std::remove_cvref_t<A>>::value) && requires(A&& a) { std::forward<A>(a).await_resume(); }
auto with_deadline(A&& a, std::chrono::time_point<std::chrono::steady_clock, Duration> when) {
  return with_deadline(detail::as_task(std::forward<A>(a)), when);
}

/// with_timeout for any awaitable, as with_deadline(a, now + d).
/// `auto r = co_await weft::with_timeout(listener.accept(), 1s);` Not to be confused
/// with weft::io::with_timeout (the operation's own result): qualify the call where
/// both namespaces are imported (unqualified, it is ambiguous).
template <class A, class Rep, class Period>
  requires(!detail::is_task<std::remove_cvref_t<A>>::value) && requires(A&& a) { std::forward<A>(a).await_resume(); }
auto with_timeout(A&& a, std::chrono::duration<Rep, Period> d) {
  return with_timeout(detail::as_task(std::forward<A>(a)), d);
}

}  // namespace weft
