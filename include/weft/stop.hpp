// weft/stop.hpp: the stop token a task runs under (weft::this_task).
//
// weft has one cancellation model: std::stop_token. A task runs under at most one
// token. Where it comes from:
// * a task awaited runs under the token of the task awaiting it: `co_await t`,
//   `co_await weft::spawn(t)` (also with .run_on / .priority), and the children of an
//   awaited spawn_many(...) or spawn_tuple(...) (also with .run_on);
// * a child of a weft::scope runs under a token of its own, which the scope's token
//   stops (weft/scope.hpp);
// * a task started by sync_wait, run, post, detach, `.fork()` or fork_group starts with
//   none: `.fork()` and fork_group::fork are plain calls that never see the forking
//   task (only an awaiter does), and reading it on every fork would cost the hot path.
//   Give such work a scope, or pass a token as an argument.
// * a fiber runs under fiber_options::stop_token (what it awaits sees it as a task's).
// Stopping is cooperative: the token's owner calls request_stop(); the task sees it
// through `co_await weft::this_task::stop_requested()`, and every weft wait watches it
// by itself. The rule for what a stopped wait evaluates to: a wait that has a
// "nothing" result reports the stop through it, one that has none throws
// weft::cancelled:
//   - the I/O operations of weft::io, io_uring (accept, connect, read_some, write_some,
//     write_all, sleep_for) and Asio through use_task: std::errc::operation_canceled
//     (io/README.md);
//   - channel pull(): std::nullopt; push(): false (nothing taken, nothing pushed; the
//     channel stays open);
//   - mutex lock(), semaphore acquire(), the waits of the events and the latch,
//     barrier arrive_and_wait() (the arrival is withdrawn): weft::cancelled, nothing
//     taken.
// A wait that need not suspend (an element is there, the mutex is free) completes even
// under a stopped token: only waiting is cut short. I/O follows the same rule on both
// backends: under a stopped token an operation is still started and then cancelled at
// once, so what the kernel can do without waiting (data already there, room in the send
// buffer) is done, and the rest ends with operation_canceled. A last write that must
// not be cut short (a 503, a flush, a TLS close_notify) watches an empty token instead
// of the task's: `co_await weft::io::with_cancel(s.write_all(buf, n), std::stop_token{})`
// (io/README.md, "Cancellation and stop tokens"). Blocking forms for plain threads
// (pull_wait, lock_wait, ...) run under no token. Joins do not end early: awaiting a
// task, a fork, a fiber handle, a scope's join() or next() waits for work that runs
// on, which the same stop reaches when it runs under that token (a scope's children
// do; forks start with none). How the primitives do it: include/weft/detail/waiter.hpp.
#pragma once

#include <coroutine>
#include <stop_token>
#include <system_error>
#include <type_traits>

#include "weft/task.hpp"

namespace weft {

/// Thrown from a wait that has no "nothing happened" result of its own (mutex::lock,
/// semaphore::acquire, the waits of events and latch, barrier::arrive_and_wait) when the
/// stop token of the task awaiting it is stopped before the wait completes; nothing was
/// taken. A std::system_error with code std::errc::operation_canceled. A weft::scope
/// counts a child that ends with it after the scope was stopped as stopped, not
/// failed; weft::with_timeout turns it into std::errc::timed_out when its deadline
/// caused the stop.
class cancelled : public std::system_error {
 public:
  cancelled() : std::system_error(std::make_error_code(std::errc::operation_canceled), "weft: the wait was stopped") {}
};

namespace detail {

/// Reads, without suspending, where the awaiting weft task's token is (or null when it
/// runs under none); the two awaiters below differ only in what they evaluate to. Used
/// once by its co_await, on the awaiting thread.
class task_token_reader {
 public:
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    static_assert(std::is_base_of_v<promise_base, Promise>,
                  "weft::this_task: co_await it from a weft::task, whose token it reads");
    m_token = h.promise().m_stop;  // its owner outlives the task (promise_base::m_stop)
    return false;                  // never suspends: the coroutine goes on at once
  }

 protected:
  const std::stop_token* m_token = nullptr;
};

/// Evaluates to a copy of the token (an empty one when there is none).
struct stop_token_awaiter : task_token_reader {
  std::stop_token await_resume() const noexcept { return m_token != nullptr ? *m_token : std::stop_token{}; }
};

/// Evaluates to stop_requested() of the token (false when there is none).
struct stop_requested_awaiter : task_token_reader {
  bool await_resume() const noexcept { return m_token != nullptr && m_token->stop_requested(); }
};

/// A stop callback that forwards a parent token's stop request to a source (a scope's,
/// a scope child's, a deadline's).
struct stop_forward {
  std::stop_source* m_source;
  void operator()() const noexcept { m_source->request_stop(); }
};

/// Runs task `h` inline (as `co_await` would) under token `tok` instead of the awaiting
/// task's. Used once by its co_await.
template <class Promise>
struct run_under_token {
  std::coroutine_handle<Promise> m_h;
  const std::stop_token* m_tok;
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> c) noexcept {
    m_h.promise().m_continuation = c;
    m_h.promise().m_stop = m_tok;
    return m_h;
  }
  decltype(auto) await_resume() { return m_h.promise().m_result.take(); }  // rethrows
};

}  // namespace detail

namespace this_task {

/// `std::stop_token tok = co_await weft::this_task::stop_token();`: the token the
/// awaiting task runs under (see the file comment), or an empty token
/// (stop_possible() false) when it runs under none. Does not suspend. Only from a
/// weft::task (a compile error elsewhere). The token may be read from any thread.
[[nodiscard]] inline detail::stop_token_awaiter stop_token() noexcept { return {}; }

/// `if (co_await weft::this_task::stop_requested()) co_return;`: true once a stop was
/// requested on the awaiting task's token; false when it runs under none. Does not
/// suspend. Only from a weft::task.
[[nodiscard]] inline detail::stop_requested_awaiter stop_requested() noexcept { return {}; }

}  // namespace this_task

}  // namespace weft
