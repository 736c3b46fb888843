// weft/detail/reactor.hpp: an event source that a pool worker drives besides its
// queues. Not API: weft::io::io_pool gives each worker of its thread_pool an io_uring
// ring through it (io/src/uring_context.cpp).
//
// How the worker loop (src/worker.cpp, src/idle.cpp) uses it:
// * attach() once on the worker thread before it takes work; detach() after its last.
// * poll() when the worker finds no work, and every few dozen items while it is busy:
//   it submits what tasks prepared and resumes the tasks whose operations completed,
//   inline, on this worker.
// * A parked worker waits in wait() instead of on its futex word: wakers call wake().
//   When wait() returns because of the reactor's own events (pending() is true, not
//   a wake-up), the worker takes itself off the parked list and polls.
// * deadlines(): weft::with_deadline arms its deadline there when it runs on this
//   worker (weft/detail/timer.hpp); the reactor then fires them in poll() and bounds
//   wait() by the earliest, and hands what is left to the timer thread in detach().
#pragma once

#include <cstdint>

namespace weft::detail {

class timer_queue;

class worker_reactor {
 public:
  virtual ~worker_reactor() = default;

  /// The worker thread starts (its index): binds the reactor to it.
  virtual void attach(unsigned index) noexcept = 0;
  /// The worker's loop has ended (the pool is stopping): no task is resumed any more.
  virtual void detach() noexcept = 0;
  /// Worker thread: submits prepared work and resumes what completed (never blocks).
  /// True when it ran anything.
  virtual bool poll() noexcept = 0;
  /// Worker thread: true when poll() may have something to do right now (cheap).
  virtual bool pending() const noexcept = 0;
  /// Worker thread, parked: blocks until wake() or one of the reactor's events, without
  /// running any task. May return spuriously.
  virtual void wait() noexcept = 0;
  /// Any thread: makes a wait() in progress, or the next one, return.
  virtual void wake() noexcept = 0;
  /// Worker thread: the queue this reactor fires deadlines of, or null (the process-wide
  /// timer thread fires them then).
  virtual timer_queue* deadlines() noexcept { return nullptr; }
  /// Any thread: operations submitted to the reactor and completed, so far
  /// (weft::worker_metrics::io_submitted and io_completed).
  struct counts {
    std::uint64_t submitted = 0;
    std::uint64_t completed = 0;
  };
  virtual counts operation_counts() const noexcept { return {}; }
};

}  // namespace weft::detail
