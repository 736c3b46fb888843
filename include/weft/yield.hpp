// weft/yield.hpp: cooperative priority yield.
#pragma once

#include <coroutine>

#include "weft/detail/worker_context.hpp"

namespace weft {

namespace detail {
/// True when work of higher priority than the running task waits in this worker's
/// pool (src/worker.cpp). False outside a pool worker.
bool higher_priority_waiting() noexcept;
/// Re-queues `h` on the current worker at the current priority (src/worker.cpp).
void requeue_current(std::coroutine_handle<> h) noexcept;
}  // namespace detail

/// Awaiter of yield_if_requested(). Stateless; used by the co_await on the awaiting
/// thread (the coroutine protocol).
struct yield_awaiter {
  /// True (no suspension) unless higher-priority work waits in this worker's pool.
  bool await_ready() const noexcept { return !detail::higher_priority_waiting(); }
  /// Re-queues the awaiting coroutine `h` on this worker at its own priority and returns
  /// to the worker loop.
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h) const noexcept {
    detail::requeue_current(h);
    return std::noop_coroutine();  // back to the worker loop, which takes the highest priority first
  }
  /// Nothing.
  void await_resume() const noexcept {}
};

/// `co_await weft::yield_if_requested()`: when higher-priority work is waiting in this
/// pool, suspends the task (re-queued at its own priority) so a worker can run that
/// work first; otherwise continues at once, at the cost of a few loads. Use it in
/// long-running low-priority loops. Outside a pool worker it never suspends.
/// Thread-safe: it looks only at the calling worker's own pool.
inline yield_awaiter yield_if_requested() noexcept { return {}; }

}  // namespace weft
