// weft/pool.hpp: weft::thread_pool, the work-stealing executor.
//
// Where things live: the worker loop is src/worker.cpp, stealing src/stealing.cpp,
// parking src/idle.cpp, topology and pinning src/topology.cpp, the deque
// include/weft/detail/split_deque.hpp.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>

#include "weft/executor.hpp"
#include "weft/metrics.hpp"

namespace weft {

/// The default number of workers: the physical cores (hwloc) that hold a CPU of this
/// process's affinity mask (the mask's CPUs where hwloc describes no cores), capped by
/// the cgroup CPU quota (rounded up) if one is set; at least 1. Computed once per
/// process. Thread-safe.
std::size_t default_thread_count();

/// Options of a thread_pool: `weft::thread_pool pool{{.threads = 8, .priorities = 3}};`
/// A plain value (no synchronization); read once by the constructor.
struct pool_options {
  std::size_t threads = default_thread_count();  ///< worker threads, 1..4096
  unsigned priorities = 4;                       ///< priority levels 1..16; 0 is highest
  bool pin = false;                              ///< bind worker i to core i (hwloc)
  /// Steal rounds (a sweep over every other worker, then a short pause) an idle worker
  /// makes before it parks, 0..65536 (0 counts as 1). More rounds find new work sooner
  /// and burn more CPU while idle. Only a few idle workers search at once (half the
  /// workers, and no more than the CPUs the process may use); the others park at once,
  /// so a pool larger than the machine does not spend its CPUs searching.
  unsigned spins = 64;
  /// Called with an exception nobody can rethrow any more (a task started with
  /// `.detach()`, an abandoned fork_handle's child, a fork_group or scope destroyed
  /// before rethrowing it), on the worker of this pool where it is reported. Empty (the
  /// default): the exception's what() is printed to stderr. Must not throw: an exception
  /// escaping it terminates the process.
  std::function<void(std::exception_ptr)> on_unhandled_exception{};
  /// Runs on each worker thread, with the worker's index (0..threads-1), before the
  /// worker takes any work (after pinning): name the thread, set its affinity, register
  /// it with a tracer. Must not throw (terminates).
  std::function<void(std::size_t)> on_thread_start{};
  /// Runs on each worker thread, with its index, after its last task, just before the
  /// thread ends (during the pool's destruction). Must not throw (terminates).
  std::function<void(std::size_t)> on_thread_stop{};
};

namespace detail {
class pool_impl;
class worker_reactor;
}  // namespace detail
namespace io {
class io_pool;
}

/// A work-stealing pool of worker threads. Each worker has one deque per priority
/// (owner LIFO, thieves FIFO) and an inbox for work posted from other threads. A worker
/// always takes the highest-priority work it can see; running tasks are never
/// preempted (see weft::yield_if_requested). Thread-safe.
///
/// Destruction: no new work is accepted from threads outside the pool; every task
/// already queued, and everything those tasks spawn, runs to completion; then the
/// workers are joined. A task suspended on something that never resumes it is not
/// queued and is not waited for. Destroying a pool from one of its own workers is a
/// programming error (it would wait for itself): the process is aborted with a message.
class thread_pool final : public executor {
 public:
  /// Starts the workers. Throws std::invalid_argument for threads == 0 or > 4096,
  /// priorities outside 1..16 or spins > 65536, std::system_error if a thread cannot be
  /// started.
  explicit thread_pool(pool_options options = {});
  /// Stops the pool as the class comment says (queued work runs to completion, then the
  /// workers are joined); aborts when called on one of its own workers.
  ~thread_pool() override;
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// executor::schedule: from one of its workers, pushes `h` onto that worker's deque
  /// (stealable); from any other thread, hands it to a parked worker or a worker's inbox
  /// and wakes one. Thread-safe. Throws std::out_of_range for prio >= priorities(),
  /// shutdown_error from a foreign thread once destruction began.
  void schedule(std::coroutine_handle<> h, unsigned prio) override;
  /// pool_options::priorities. Thread-safe.
  unsigned priorities() const noexcept override;
  /// True on one of this pool's worker threads. Thread-safe.
  bool owns_current_thread() const noexcept override;
  /// On one of its workers: makes that worker's queued work visible to thieves (and
  /// wakes one), since the worker is about to block. Elsewhere nothing. Thread-safe.
  void before_blocking() noexcept override;

  /// Number of worker threads. Thread-safe.
  std::size_t thread_count() const noexcept;

  /// A snapshot of the workers' counters (weft/metrics.hpp): tasks run and stolen,
  /// steal attempts, parks, time busy and parked, queue depths; for an io_pool's pool
  /// also each ring's operations. Cheap (a few loads per worker, one allocation);
  /// thread-safe, from any thread, workers included.
  pool_metrics metrics() const;

 private:
  friend class io::io_pool;
  // weft::io::io_pool's pool: worker i also drives reactors[i] (weft/detail/reactor.hpp),
  // which must outlive the pool.
  thread_pool(pool_options options, std::span<detail::worker_reactor* const> reactors);

  std::unique_ptr<detail::pool_impl> m_impl;
};

/// The process-wide pool with default options, started on first use and stopped at
/// exit. Thread-safe.
thread_pool& default_pool();

}  // namespace weft
