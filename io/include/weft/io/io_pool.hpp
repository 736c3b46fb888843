// weft/io/io_pool.hpp: weft::io::io_pool, a work-stealing thread_pool whose workers each
// own an io_uring ring: services on every core.
//
//   weft::io::io_pool io{{.threads = 4}};
//   weft::io::tcp_listener listener(io, worker);  // one per worker, listen_options::reuse_port
//   auto [ec, stream] = co_await listener.accept();
//   auto [ec2, n] = co_await stream.read_some(buf, sizeof buf);
//
// Design. Each worker of the pool drives its own ring (weft/detail/reactor.hpp, and
// the io_pool part of io/src/uring_context.cpp):
// * An operation a task starts on worker W (read, write, connect, sleep_for) is
//   prepared on W's ring by the task itself, with no lock and no hand-off. The worker
//   submits everything its tasks prepared in one io_uring_enter when it polls: when it
//   runs out of work, after each sweep while it searches for work to steal, and every
//   32 items while it is busy.
// * A completion is reaped by the worker that owns the ring and resumes its task right
//   there, inline: a task that awaits I/O comes back on the worker it started the
//   operation from. A task stolen while queued starts its next operation on the
//   thief's ring: a stream's operations may run on different rings over its life, so
//   its socket keeps working wherever its task runs.
// * Balance: while an idle worker has asked for work, a completion with at least 16
//   more of its batch behind it is queued as shared work (and the idle worker woken)
//   instead of resumed inline, so that tasks which all started on one worker spread
//   over the others (weft::detail::offer_to_thief; io/src/uring_context.cpp, reap).
// * An idle worker parks in its ring (io_uring_enter waiting for one completion) instead
//   of on a futex: a completion, or a wake-up from the pool (an eventfd the ring keeps
//   a read on) ends the wait. Woken by its own completion, the worker takes itself off
//   the pool's list of parked workers before it runs anything.
// * Operations from threads outside the pool are handed to the workers' rings in turn
//   (a queued call, as on a uring_context) and resume their tasks where they awaited.
// * Listening: a tcp_listener runs its accepts on one ring (a worker given to its
//   constructor). N listeners with SO_REUSEPORT, one per worker, each with its own
//   accept loop, let the kernel spread connections over the workers.
#pragma once

#include <coroutine>
#include <cstddef>

#include "weft/io/uring_context.hpp"
#include "weft/pool.hpp"

namespace weft::io {

/// A weft executor: a thread_pool (fork-join, priorities, stealing, everything a
/// thread_pool runs) whose workers each own an io_uring ring for the sockets and timers
/// of weft/io/tcp.hpp and weft/io/sleep.hpp. It is a uring_context, so every socket
/// type takes it. See the top of this file for how I/O runs on the workers.
///
/// Destruction: as thread_pool (queued work runs to completion, then the workers are
/// joined); operations still in flight are abandoned (their tasks never resume):
/// finish them, and destroy every socket, first. Destroying it from one of its workers
/// aborts. Thread-safe.
class io_pool final : public uring_context {
 public:
  /// Starts `pool.threads` workers, each with a ring of `ring.entries` entries
  /// (ring.priorities is not used: the pool's priorities apply). Throws
  /// uring_unavailable when io_uring cannot be used here (there is no fallback: a
  /// thread_pool plus a uring_context or an asio_executor serves then),
  /// std::invalid_argument for bad options (as thread_pool and uring_context),
  /// std::system_error if a thread cannot be started.
  explicit io_pool(pool_options pool = {}, uring_options ring = {});
  /// Stops the pool as the class comment says.
  ~io_pool() override;

  /// thread_pool::schedule. Thread-safe.
  void schedule(std::coroutine_handle<> h, unsigned prio) override { m_pool.schedule(h, prio); }
  /// pool_options::priorities. Thread-safe.
  unsigned priorities() const noexcept override { return m_pool.priorities(); }
  /// True on one of its workers. Thread-safe.
  bool owns_current_thread() const noexcept override { return m_pool.owns_current_thread(); }
  /// thread_pool::before_blocking. Thread-safe.
  void before_blocking() noexcept override { m_pool.before_blocking(); }

  /// Number of workers (and rings). Thread-safe.
  std::size_t thread_count() const noexcept { return m_pool.thread_count(); }
  /// thread_pool::metrics, with each worker's ring operations (io_submitted,
  /// io_completed, io_in_flight). Thread-safe.
  pool_metrics metrics() const { return m_pool.metrics(); }
  /// The thread_pool the tasks run on (weft::current_executor() inside them). Thread-safe.
  thread_pool& pool() noexcept { return m_pool; }

 private:
  thread_pool m_pool;
};

}  // namespace weft::io
