// priority: how long high-priority work waits behind low-priority compute (bench/README.md).
//
// The pool is saturated with fib(n) (fork x2, as bench/fib). Meanwhile a thread outside
// the pool posts one tiny probe task every 100 us (open loop: it does not wait for the
// probes) until fib is done. A probe's start latency is the time from just before its
// post to the moment it starts running on a worker.
//
// Flavors:
//   levels1  a pool with 1 priority level: fib and probes share priority 0
//   levels2  a pool with 2 levels: fib runs at priority 1, probes at priority 0
// The answer is fib(n), and every probe must have run exactly once. Per timed run the
// binary prints, before the report (bench/README.md):
//   latency: samples=<k> p50_ns=<x> p99_ns=<y> max_ns=<z>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/fib.hpp"

namespace {

using weft_bench::fib_answer;
using weft_bench::fib_fj;

using clock_type = std::chrono::steady_clock;

constexpr auto k_probe_interval = std::chrono::microseconds(100);

struct probe_slot {
  clock_type::time_point posted;
  std::atomic<std::int64_t> started_ns{-1};  // start - posted; -1 until it ran
  std::atomic<int> runs{0};
};

weft::task<void> probe(probe_slot& s) {
  const auto now = clock_type::now();
  s.started_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.posted).count(),
                     std::memory_order_relaxed);
  s.runs.fetch_add(1, std::memory_order_release);
  co_return;
}

// The pool of a flavor: one per process (the driver runs one flavor per process).
weft::thread_pool& pool_with_levels(int threads, unsigned levels) {
  static weft::thread_pool pool{{.threads = static_cast<std::size_t>(threads), .priorities = levels}};
  return pool;
}

// Percentile p (0..100) of sorted values, nearest rank.
std::int64_t percentile(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(rank, sorted.size() - 1)];
}

// One run: fib(n) at `low` priority, probes at `high` from this (outside) thread.
// Returns fib(n), or 0 when a probe went missing or ran twice (the check then fails).
std::uint64_t run_with_probes(int threads, std::uint64_t n, unsigned levels) {
  weft::thread_pool& pool = pool_with_levels(threads, levels);
  const unsigned high = 0, low = levels - 1;

  // A deque: slots keep their address as it grows, and only the ones used cost memory.
  std::deque<probe_slot> slots;
  std::atomic<bool> fib_done{false};
  std::uint64_t result = 0;
  std::thread compute([&] {
    result = weft::sync_wait(pool, fib_fj(n), low);
    fib_done.store(true, std::memory_order_release);
  });

  std::size_t posted = 0;
  auto next = clock_type::now();
  while (!fib_done.load(std::memory_order_acquire)) {
    next += k_probe_interval;
    probe_slot& s = slots.emplace_back();
    ++posted;
    s.posted = clock_type::now();
    weft::post(pool, probe(s), high);
    std::this_thread::sleep_until(next);  // sleeping, not spinning: the pool keeps both cores
  }
  compute.join();

  // Every probe must run exactly once; they all do eventually, after fib at the latest.
  const auto deadline = clock_type::now() + std::chrono::seconds(30);
  std::vector<std::int64_t> lat;
  lat.reserve(posted);
  bool ok = true;
  for (std::size_t i = 0; i < posted; ++i) {
    while (slots[i].runs.load(std::memory_order_acquire) == 0 && clock_type::now() < deadline)
      std::this_thread::yield();
    if (slots[i].runs.load(std::memory_order_acquire) != 1) ok = false;
    lat.push_back(slots[i].started_ns.load(std::memory_order_relaxed));
  }
  std::sort(lat.begin(), lat.end());
  std::printf("latency: samples=%zu p50_ns=%lld p99_ns=%lld max_ns=%lld\n", lat.size(),
              static_cast<long long>(percentile(lat, 50)), static_cast<long long>(percentile(lat, 99)),
              static_cast<long long>(lat.empty() ? 0 : lat.back()));
  if (!ok) {
    std::printf("probes: some of the %zu probes did not run exactly once\n", posted);
    return 0;
  }
  return result;
}

const weft_bench::workload<std::uint64_t> k_priority{
    .name = "priority",
    .size_meaning = "n of the low-priority fib(n) that saturates the pool; 10..60",
    .default_size = 39,
    .size_ok = [](std::uint64_t n) { return n >= 10 && n <= 60; },
    .check = [](std::uint64_t n, const std::uint64_t& got) { return weft_bench::expect_equal(got, fib_answer(n)); },
    .flavors =
        {
            {"levels1", [](int t, std::uint64_t n) { return run_with_probes(t, n, 1); }},
            {"levels2", [](int t, std::uint64_t n) { return run_with_probes(t, n, 2); }},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_priority); }
