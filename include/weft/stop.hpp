// weft/stop.hpp: the stop token a task runs under (weft::this_task).
//
// weft has one cancellation model: std::stop_token. A task runs under at most one
// token. Where it comes from:
// * a task awaited with `co_await t` (or `co_await weft::spawn(t)` with nothing
//   configured) runs under the token of the task awaiting it;
// * a child of a weft::scope runs under the scope's token (weft/scope.hpp);
// * a task started by sync_wait, run, post, detach, `.fork()`, fork_group, spawn_many or
//   spawn_tuple starts with none (a fork is a push onto the worker's deque that does not
//   see the forking task); give such work a scope, or pass a token as an argument.
// Stopping is cooperative: the token's owner calls request_stop(); the task sees it
// through `co_await weft::this_task::stop_requested()`, and the operations that watch
// the token end early with their documented result (the io_uring operations of
// weft::io end with std::errc::operation_canceled, weft/io/tcp.hpp).
#pragma once

#include <coroutine>
#include <stop_token>
#include <type_traits>

#include "weft/task.hpp"

namespace weft {

namespace detail {

/// The token the weft task behind `h` runs under, or null (no token, or not a weft task).
template <class Promise>
const std::stop_token* task_stop_token(std::coroutine_handle<Promise> h) noexcept {
  if constexpr (std::is_base_of_v<promise_base, Promise>) return h.promise().m_stop;
  else return nullptr;
}

/// Awaiter that reads the awaiting task's token without suspending it. Used once by its
/// co_await, on the awaiting thread.
class stop_token_awaiter {
 public:
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    static_assert(std::is_base_of_v<promise_base, Promise>,
                  "weft::this_task: co_await it from a weft::task, whose token it reads");
    if (const std::stop_token* t = task_stop_token(h)) m_token = *t;
    return false;  // never suspends: the coroutine goes on at once
  }
  std::stop_token await_resume() noexcept { return std::move(m_token); }

 private:
  std::stop_token m_token;
};

/// As stop_token_awaiter, evaluating to stop_requested() of the token.
class stop_requested_awaiter {
 public:
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    static_assert(std::is_base_of_v<promise_base, Promise>,
                  "weft::this_task: co_await it from a weft::task, whose token it reads");
    const std::stop_token* t = task_stop_token(h);
    m_requested = t != nullptr && t->stop_requested();
    return false;
  }
  bool await_resume() const noexcept { return m_requested; }

 private:
  bool m_requested = false;
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
