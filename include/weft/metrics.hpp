// weft/metrics.hpp: what a pool's workers have done, for the operator of a service.
//
//   weft::thread_pool pool;                      // or a weft::io::io_pool
//   const weft::pool_metrics m = pool.metrics();  // a snapshot, from any thread
//   std::fputs(weft::format_metrics(m).c_str(), stdout);
//
// Each worker counts for itself (plain relaxed stores on its own cache line, no atomic
// read-modify-write), so the counters cost nothing measurable on the fork-join path; a
// snapshot reads them with relaxed loads: each value is exact for its worker at some
// moment during the call, the sums are not one instant's.
//
// The names format_metrics() writes are stable (a rename is a breaking change), in the
// Prometheus text format, one line per worker and name with a `worker` label:
//
//   weft_uptime_seconds                   gauge    seconds since the pool started (no label)
//   weft_tasks_run_total                  counter  work items the worker took from a queue and resumed
//   weft_tasks_stolen_total               counter  of those, items taken from another worker
//   weft_steal_attempts_total             counter  other workers looked at for work (deque and inbox)
//   weft_parks_total                      counter  times the worker went to sleep for lack of work
//   weft_busy_seconds_total               counter  time not parked (running, polling or searching)
//   weft_parked_seconds_total             counter  time parked
//   weft_deque_depth                      gauge    items queued in the worker's deques (sampled)
//   weft_inbox_depth                      gauge    items posted to the worker from other threads
//   weft_io_submitted_total               counter  io_pool: operations started on the worker's ring
//   weft_io_completed_total               counter  io_pool: operations whose last completion was reaped
//   weft_io_in_flight                     gauge    io_pool: submitted and not completed
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

/// One worker's counters (see the top of this file for what each counts).
struct worker_metrics {
  /// Work items the worker took from a queue (its deques, its inbox, another worker's)
  /// and resumed. A chain of tasks that runs by symmetric transfer (a fork joined
  /// inline, a continuation) counts once; a task resumed by an I/O completion counts in
  /// io_completed instead.
  std::uint64_t tasks_run = 0;
  /// Of tasks_run, the items taken from another worker's deque or inbox.
  std::uint64_t tasks_stolen = 0;
  /// Other workers the worker looked at (their deque and inbox) while it looked for work
  /// (those whose bit in the pool's work bitmap said they had none are not counted).
  std::uint64_t steal_attempts = 0;
  /// Times the worker parked (slept until woken) because it found no work.
  std::uint64_t parks = 0;
  /// Time since the worker started that it was not parked: running tasks, polling its
  /// ring, searching for work.
  std::chrono::nanoseconds busy{0};
  /// Time it was parked (the park in progress included).
  std::chrono::nanoseconds parked{0};
  /// Items queued in its deques, all priorities, as the worker last published it (it
  /// does so every 61 items it takes and when it parks).
  std::size_t deque_depth = 0;
  /// Items posted to its inbox from outside the pool, not yet taken.
  std::size_t inbox_depth = 0;
  /// io_pool only (0 for a thread_pool): operations started on the worker's ring.
  std::uint64_t io_submitted = 0;
  /// io_pool only: operations whose last completion the worker reaped.
  std::uint64_t io_completed = 0;
  /// io_pool only: io_submitted - io_completed, at the snapshot.
  std::uint64_t io_in_flight = 0;

  /// Adds `other`'s counts to these (total()).
  worker_metrics& operator+=(const worker_metrics& other) noexcept;
};

/// A snapshot of a pool (thread_pool::metrics(), io::io_pool::metrics()).
struct pool_metrics {
  /// Time since the pool started.
  std::chrono::nanoseconds uptime{0};
  /// One entry per worker, by index.
  std::vector<worker_metrics> workers;

  /// The sum over the workers.
  worker_metrics total() const noexcept;
};

/// The snapshot in the Prometheus text exposition format: for each name of the top of
/// this file a `# HELP` and a `# TYPE` line, then one sample per worker (label
/// `worker="i"`; weft_uptime_seconds has one sample, no label).
std::string format_metrics(const pool_metrics& m);

}  // namespace weft
