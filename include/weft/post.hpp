// weft/post.hpp: fire-and-forget a task on an executor.
#pragma once

#include "weft/executor.hpp"
#include "weft/task.hpp"

namespace weft {

/// Queues `t` on `ex` at priority `prio` (0 is highest) and returns at once; the task
/// runs detached, its result is discarded and an exception it throws is reported to
/// stderr. Thread-safe. Throws std::out_of_range for prio >= ex.priorities(),
/// shutdown_error if `ex` no longer accepts work, std::logic_error for an empty task;
/// in every error case the task is destroyed without running.
template <class T>
void post(executor& ex, task<T> t, unsigned prio = 0) {
  if (!t.valid()) detail::throw_bad_await("weft::post: empty or moved-from task");
  check_priority(ex, prio, "weft::post");
  auto h = detail::task_handle(t);
  h.promise().m_mode = detail::completion::detached;
  h.promise().m_prio = static_cast<std::uint8_t>(prio);
  ex.schedule(h, prio);  // throws before taking ownership
  (void)detail::release_task(t);
}

}  // namespace weft
