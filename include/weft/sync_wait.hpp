// weft/sync_wait.hpp: block a plain thread until a task finished on an executor;
// weft::run for the async-main shape.
#pragma once

#include <condition_variable>
#include <coroutine>
#include <exception>
#include <mutex>
#include <utility>

#include "weft/executor.hpp"
#include "weft/pool.hpp"
#include "weft/task.hpp"

namespace weft {

namespace detail {

/// Where sync_wait's blocked thread waits for the root coroutine.
struct sync_signal {
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_done = false;

  void notify() noexcept {
    std::lock_guard lock(m_mutex);  // the waiter cannot return before we unlock
    m_done = true;
    m_cv.notify_one();
  }
  void wait() noexcept {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [&] { return m_done; });
  }
};

/// The coroutine sync_wait queues: awaits the user's task, then signals.
struct sync_root {
  struct promise_type : promise_base {
    sync_signal* m_signal = nullptr;
    sync_root get_return_object() noexcept {
      return sync_root{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    auto final_suspend() const noexcept {
      struct signal_after_suspend {
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) const noexcept { h.promise().m_signal->notify(); }
        void await_resume() const noexcept {}
      };
      return signal_after_suspend{};
    }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }  // the body catches everything
  };
  std::coroutine_handle<promise_type> m_h;
};

template <class T>
sync_root make_sync_root(task<T>& t, result<T>& out) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await t;
    } else if constexpr (std::is_reference_v<T>) {
      out.set_value(co_await t);
    } else {
      out.set_value(co_await t);
    }
  } catch (...) {
    out.set_error(std::current_exception());
  }
}

/// Throws std::logic_error if blocking here would deadlock `ex` (src/task.cpp).
void check_can_block(executor& ex);

}  // namespace detail

/// Runs `t` on `ex` at priority `prio`, blocks the calling thread until it finished,
/// and returns its value (or rethrows its exception). Thread-safe. Throws
/// std::logic_error when called on one of `ex`'s own threads (that would deadlock:
/// co_await the task instead), std::out_of_range for a bad priority, shutdown_error if
/// `ex` is shutting down, std::logic_error for an empty task.
template <class T>
T sync_wait(executor& ex, task<T> t, unsigned prio = 0) {
  if (!t.valid()) detail::throw_bad_await("weft::sync_wait: empty or moved-from task");
  detail::check_can_block(ex);
  check_priority(ex, prio, "weft::sync_wait");
  detail::result<T> out;
  detail::sync_signal signal;
  detail::sync_root root = detail::make_sync_root(t, out);
  root.m_h.promise().m_signal = &signal;
  try {
    ex.schedule(root.m_h, prio);
  } catch (...) {
    root.m_h.destroy();
    throw;
  }
  signal.wait();
  root.m_h.destroy();
  return out.take();
}

/// Runs `t` on weft::default_pool() and returns its value: the async-main shape,
/// `int main() { return weft::run(async_main()); }`. Same errors as sync_wait.
/// Thread-safe: any thread but default_pool()'s own workers may call it.
template <class T>
T run(task<T> t) {
  return sync_wait(default_pool(), std::move(t));
}

}  // namespace weft
