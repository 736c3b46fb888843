// bench/common/executors.hpp: the executors the flavors run on, one per process.
//
// Each is built on first use, that is in the untimed warm-up, and reused by the
// timed runs, as a long-lived program would (and as the runtime-benchmarks suite
// does). A process only ever uses one thread count.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include <omp.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <weft/weft.hpp>

#include "driver.hpp"

namespace weft_bench {

/// Throws unless `threads` is the count this process started with.
inline void check_same_threads(int first, int threads) {
  if (first != threads) {
    throw std::logic_error("bench: one process, one thread count (" + std::to_string(first) + " then " +
                           std::to_string(threads) + ")");
  }
}

/// A oneTBB arena of `threads` slots, the calling thread being one of them
/// (task_arena's default: one slot reserved for the thread that calls
/// execute()). global_control sets the process-wide limit to the same count,
/// so that T above the hardware thread count is honoured too.
inline tbb::task_arena& tbb_arena(int threads) {
  static tbb::global_control limit{tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads)};
  static tbb::task_arena arena{threads};
  check_same_threads(arena.max_concurrency(), threads);
  return arena;
}

/// Runs `root()` as the single task that starts one OpenMP parallel region of
/// `threads` threads; the others pick up its tasks. The OpenMP runtime keeps
/// its threads between regions, so the warm-up starts them.
template <class Fn>
auto omp_root(int threads, Fn root) {
  omp_set_num_threads(threads);
  if constexpr (std::is_void_v<decltype(root())>) {
#pragma omp parallel
#pragma omp single
    root();
  } else {
    decltype(root()) result{};
#pragma omp parallel
#pragma omp single
    result = root();
    return result;
  }
}

/// The weft pool of `threads` workers.
inline weft::thread_pool& weft_pool(int threads) {
  static weft::thread_pool pool{{.threads = static_cast<std::size_t>(threads)}};
  static const int first = threads;
  check_same_threads(first, threads);
  // The driver prints its steals and parks per run (weft::thread_pool::metrics()).
  g_pool_counters = [] {
    const auto t = pool.metrics().total();
    return pool_counters{t.tasks_stolen, t.parks};
  };
  return pool;
}

}  // namespace weft_bench
