// weft/resume_on.hpp: hop the running task to another executor.
#pragma once

#include <coroutine>

#include "weft/executor.hpp"

namespace weft {

/// Awaiter of resume_on(). Used once by that co_await, on the awaiting thread (the
/// coroutine protocol; not thread-safe itself).
class resume_on_awaiter {
 public:
  /// Targets `ex`, which must outlive the await.
  explicit resume_on_awaiter(executor& ex) noexcept : m_ex(&ex) {}
  /// Never ready: the task always goes through ex's queue.
  bool await_ready() const noexcept { return false; }
  /// Queues the awaiting coroutine `h` on `ex` at the current priority, clamped to ex's
  /// levels. Throws shutdown_error when `ex` refuses it (`h` then continues here).
  void await_suspend(std::coroutine_handle<> h) const {
    const unsigned n = m_ex->priorities();
    m_ex->schedule(h, current_priority() < n ? current_priority() : n - 1);
  }
  /// Nothing: the task now runs on one of ex's threads.
  void await_resume() const noexcept {}

 private:
  executor* m_ex;
};

/// `co_await weft::resume_on(ex)` suspends the task and resumes it on one of `ex`'s
/// threads, at the same priority (clamped to ex's levels). Always goes through ex's
/// queue, also when already on `ex` (a fair yield). Throws shutdown_error if `ex` no
/// longer accepts work (the task then continues where it was).
/// Thread-safe: it only makes the awaiter, which the calling task's co_await then uses.
inline resume_on_awaiter resume_on(executor& ex) noexcept { return resume_on_awaiter{ex}; }

}  // namespace weft
