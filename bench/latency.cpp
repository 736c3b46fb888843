// latency: how long weft takes to start work, not how fast it computes (bench/README.md).
//
//   (a) post:   a plain thread outside the pool posts one empty task and waits until
//               it ran; the latency is from the post to the moment the task starts
//               running (read by the task), so that the poster's own wake-up on a
//               saturated machine is not counted; p50/p99 over `size` samples, with
//               the pool idle (workers parked: the poster waits k_idle_gap between
//               samples) and busy (every worker runs streams of ~1 us tasks at the same
//               priority; the poster posts one probe every ~10-60 us without waiting
//               for the previous one, so that its own wake-up does not pace it).
//   (b) fanout: a task on the pool runs one spawn_many of N = 1, 16, 1024 empty tasks
//               and joins them; ns per fan-out (p50/p99).
//   (c) chain:  `size` tasks, each forked by the previous one and joined at once, on
//               the --threads pool and on a 1-thread pool, alternated, median of 6
//               (timed on the worker, from the first link to the last); the
//               multi-thread time must stay within 1.15x of the single-thread one
//               (ready work must not ping-pong between threads). chain_loop: the same
//               dependency forked from one loop, so that one frame is alive at a time.
//
// `bench/latency [--threads T] [--size N] [--runs R]`: the report of bench/README.md (duration =
// the whole run, output = samples), then one `latency:` line per case with the medians
// over the runs of p50 / p99 / mean. bench/run prints these lines as their own table.
// Each case checks that every task ran (FAIL otherwise); a chain over 1.15x prints a
// `latency: chain ... over` line but is not a FAIL (it measures; bench/README.md reports it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <weft/weft.hpp>

#include "common/driver.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto k_idle_gap = std::chrono::microseconds(100);  // > the workers' spin-then-park time
constexpr auto k_busy_gap = std::chrono::microseconds(10);   // asked for; the OS makes it ~60 us
constexpr double k_chain_limit = 1.15;

std::int64_t ns_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
}

struct stats {
  double p50 = 0, p99 = 0, mean = 0;
  std::size_t samples = 0;
};

stats summarize(std::vector<std::int64_t>& v) {
  stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.samples = v.size();
  s.p50 = static_cast<double>(v[v.size() / 2]);
  s.p99 = static_cast<double>(v[std::min(v.size() - 1, v.size() * 99 / 100)]);
  double sum = 0;
  for (auto x : v) sum += static_cast<double>(x);
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

struct failure {
  std::string what;
};

// ---- (a) post from outside ---------------------------------------------------------

/// The probe: notes when it started running, then tells the poster it ran.
weft::task<void> mark(std::atomic<std::int64_t>& started_at, std::atomic<std::uint64_t>& ran) {
  started_at.store(clock_type::now().time_since_epoch().count(), std::memory_order_relaxed);
  ran.fetch_add(1, std::memory_order_release);  // pairs with the poster's acquire load
  ran.notify_one();
  co_return;
}

/// The poster's wait: spin a little, then sleep on the atomic (on a saturated machine a
/// spinning poster would only steal a CPU from the workers).
void wait_for(const std::atomic<std::uint64_t>& ran, std::uint64_t want) {
  const auto spin_until = clock_type::now() + std::chrono::microseconds(50);
  std::uint64_t seen = ran.load(std::memory_order_acquire);
  while (seen != want && clock_type::now() < spin_until) seen = ran.load(std::memory_order_acquire);
  while (seen != want) {
    ran.wait(seen, std::memory_order_acquire);
    seen = ran.load(std::memory_order_acquire);
  }
}

/// One background stream: ~1 us of work, then a fair yield through the queue.
weft::task<void> busy_stream(weft::thread_pool& pool, const std::atomic<bool>& stop, std::atomic<int>& streams_left) {
  volatile std::uint64_t sink = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 300; ++i) sink = sink + static_cast<std::uint64_t>(i);
    co_await weft::resume_on(pool);
  }
  streams_left.fetch_sub(1, std::memory_order_release);
}

/// Idle pool: post, wait until the probe ran, let the workers park again; repeat.
stats post_idle(weft::thread_pool& pool, std::size_t samples) {
  std::atomic<std::uint64_t> ran{0};
  std::atomic<std::int64_t> started_at{0};
  std::vector<std::int64_t> ns;
  ns.reserve(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    const auto until = clock_type::now() + k_idle_gap;
    while (clock_type::now() < until) {
    }
    const auto t0 = clock_type::now();
    weft::post(pool, mark(started_at, ran));
    wait_for(ran, i + 1);
    const clock_type::time_point t1{clock_type::duration{started_at.load(std::memory_order_relaxed)}};
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  if (ran.load() != samples)
    throw failure{"post idle: " + std::to_string(ran.load()) + " of " + std::to_string(samples) + " ran"};
  return summarize(ns);
}

/// Busy pool: every worker runs background streams; the poster posts one probe every
/// k_busy_gap (sleeping in between, so that it takes no CPU from the workers, and
/// without waiting for the previous probe: on a saturated machine the poster's own
/// wake-up would otherwise pace the samples), then waits for all of them.
stats post_busy(weft::thread_pool& pool, std::size_t samples) {
  std::atomic<bool> stop{false};
  const int streams = static_cast<int>(pool.thread_count()) * 2;
  std::atomic<int> streams_left{streams};
  for (int i = 0; i < streams; ++i) weft::post(pool, busy_stream(pool, stop, streams_left));
  std::atomic<std::uint64_t> ran{0};
  std::vector<std::atomic<std::int64_t>> started_at(samples);
  std::vector<clock_type::time_point> posted_at(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(k_busy_gap);
    posted_at[i] = clock_type::now();
    weft::post(pool, mark(started_at[i], ran));
  }
  wait_for(ran, samples);
  stop.store(true, std::memory_order_relaxed);
  while (streams_left.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  std::vector<std::int64_t> ns(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    const clock_type::time_point t1{clock_type::duration{started_at[i].load(std::memory_order_relaxed)}};
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - posted_at[i]).count();
  }
  return summarize(ns);
}

// ---- (b) one fan-out + join ------------------------------------------------------------

weft::task<void> empty_task(std::atomic<std::uint64_t>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

weft::task<std::vector<std::int64_t>> fanouts(std::size_t n, std::size_t reps, std::atomic<std::uint64_t>& ran) {
  std::vector<std::int64_t> ns;
  ns.reserve(reps);
  std::vector<weft::task<void>> ts;
  for (std::size_t r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    ts.clear();
    for (std::size_t i = 0; i < n; ++i) ts.push_back(empty_task(ran));
    co_await weft::spawn_many(ts);
    ns.push_back(ns_since(t0));
  }
  co_return ns;
}

stats fanout_spawn_many(weft::thread_pool& pool, std::size_t n, std::size_t reps) {
  std::atomic<std::uint64_t> ran{0};
  auto ns = weft::sync_wait(pool, fanouts(n, reps, ran));
  if (ran.load() != n * reps)
    throw failure{"fanout " + std::to_string(n) + ": " + std::to_string(ran.load()) + " of " +
                  std::to_string(n * reps) + " tasks ran"};
  return summarize(ns);
}

/// The same fan-out in the group-shared shape: one group of one member per worker over
/// the claim space [0, n), each of the n items (an empty body that counts itself)
/// claimed one at a time, and the group joined by co_await.
weft::task<std::vector<std::int64_t>> dispatches(weft::thread_pool& pool, std::size_t n, std::size_t reps,
                                                 std::atomic<std::uint64_t>& ran) {
  std::vector<std::int64_t> ns;
  ns.reserve(reps);
  for (std::size_t r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    co_await weft::dispatch(pool, {.members = 0, .range = n}, [&ran](weft::group& g) {
      for (auto c = g.claim(1); c; c = g.claim(1)) ran.fetch_add(1, std::memory_order_relaxed);
    });
    ns.push_back(ns_since(t0));
  }
  co_return ns;
}

stats fanout_dispatch(weft::thread_pool& pool, std::size_t n, std::size_t reps) {
  std::atomic<std::uint64_t> ran{0};
  auto ns = weft::sync_wait(pool, dispatches(pool, n, reps, ran));
  if (ran.load() != n * reps)
    throw failure{"fanout_dispatch " + std::to_string(n) + ": " + std::to_string(ran.load()) + " of " +
                  std::to_string(n * reps) + " items ran"};
  return summarize(ns);
}

// ---- (c) serialized chain ----------------------------------------------------------------

/// Task k forks task k+1 and joins it right away: every task depends on the previous,
/// and all `left` frames are alive at the deepest point.
weft::task<std::uint64_t> chain(std::uint64_t left) {
  if (left == 0) co_return 0;
  auto next = weft::spawn(chain(left - 1)).fork();
  co_return 1 + co_await next;
}

weft::task<std::uint64_t> link() { co_return 1; }

/// The same dependency without the nesting: one task forks link k+1 once link k is
/// joined, so only one link's frame is alive at a time (isolates scheduling from the
/// memory cost of 100,000 live frames).
weft::task<std::uint64_t> chain_loop(std::uint64_t length) {
  std::uint64_t done = 0;
  for (std::uint64_t i = 0; i < length; ++i) {
    auto next = weft::spawn(link()).fork();
    done += co_await next;
  }
  co_return done;
}

/// Runs one chain on the pool; the time is taken on the worker, from the first link's
/// start to the last one's end, so that waking the pool and signalling the waiting
/// thread (the same for both pools, and noisy) are not counted.
weft::task<std::int64_t> timed_chain(std::uint64_t length, bool nested) {
  const auto t0 = clock_type::now();
  const std::uint64_t got = nested ? co_await chain(length) : co_await chain_loop(length);
  const std::int64_t ns = ns_since(t0);
  if (got != length) throw failure{"chain: " + std::to_string(got) + " of " + std::to_string(length) + " links"};
  co_return ns;
}

std::int64_t chain_ns(weft::thread_pool& pool, std::uint64_t length, bool nested) {
  return weft::sync_wait(pool, timed_chain(length, nested));
}

// ---- the run ----------------------------------------------------------------------------

using results = std::map<std::string, stats>;  // case -> figures (ns)

results run_once(weft::thread_pool& pool, weft::thread_pool& single, std::size_t size) {
  results r;
  r["post_idle"] = post_idle(pool, size);
  r["post_busy"] = post_busy(pool, size);
  for (std::size_t n : {1, 16, 1024}) {
    const std::size_t reps = n == 1024 ? std::max<std::size_t>(1, size / 100) : size;
    r["fanout_spawn_many N=" + std::to_string(n)] = fanout_spawn_many(pool, n, reps);
    r["fanout_dispatch N=" + std::to_string(n)] = fanout_dispatch(pool, n, reps);
  }
  // Alternate the two pools so that both see the same machine noise; medians of 5.
  for (const bool nested : {true, false}) {
    std::vector<std::int64_t> mt, st;
    for (int i = 0; i < 6; ++i) {  // alternate which pool goes first
      if (i % 2 == 0) mt.push_back(chain_ns(pool, size, nested));
      st.push_back(chain_ns(single, size, nested));
      if (i % 2 == 1) mt.push_back(chain_ns(pool, size, nested));
    }
    r[nested ? "chain_mt" : "chain_loop_mt"] = summarize(mt);
    r[nested ? "chain_st" : "chain_loop_st"] = summarize(st);
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const weft_bench::workload_info info{
      .name = "latency",
      .size_meaning = "samples per case of (a) and (b) (N=1024: size/100) and tasks in the chain (c)",
      .default_size = 100'000,
      .size_ok = [](std::uint64_t n) { return n >= 100 && n <= 100'000'000; },
      .flavors = {"fj"}};
  const weft_bench::options opt = weft_bench::parse_command_line(argc, argv, info);
  weft::thread_pool pool{{.threads = static_cast<std::size_t>(opt.threads)}};
  weft::thread_pool single{{.threads = 1}};
  const auto size = static_cast<std::size_t>(opt.size);

  std::vector<results> all;
  std::vector<weft_bench::run_record> records;
  try {
    (void)run_once(pool, single, std::max<std::size_t>(100, size / 10));  // warm-up, untimed
    for (int i = 0; i < opt.runs; ++i) {
      const auto t0 = clock_type::now();
      all.push_back(run_once(pool, single, size));
      records.push_back({ns_since(t0) / 1000, weft_bench::max_rss_kib()});
    }
  } catch (const failure& f) {
    return weft_bench::fail(f.what);
  }
  weft_bench::print_report(opt, records, opt.size);

  // Medians over the runs of each figure.
  std::printf("latency: %-24s %12s %12s %12s %9s  (ns; median of %d run(s))\n", "case", "p50", "p99", "mean", "samples",
              opt.runs);
  for (const auto& [name, first] : all.front()) {
    std::vector<double> p50, p99, mean;
    for (const auto& r : all) {
      p50.push_back(r.at(name).p50);
      p99.push_back(r.at(name).p99);
      mean.push_back(r.at(name).mean);
    }
    std::printf("latency: %-24s %12.0f %12.0f %12.0f %9zu\n", name.c_str(), median(p50), median(p99), median(mean),
                first.samples);
  }
  for (const char* which : {"chain", "chain_loop"}) {
    std::vector<double> ratios, mt, st;
    for (const auto& r : all) {
      mt.push_back(r.at(std::string(which) + "_mt").p50 / static_cast<double>(size));
      st.push_back(r.at(std::string(which) + "_st").p50 / static_cast<double>(size));
      ratios.push_back(mt.back() / st.back());
    }
    const double ratio = median(ratios);
    std::printf("latency: %-24s %12.3f  (limit %.2f: %s; %.1f ns per link multi-thread, %.1f single)\n",
                (std::string(which) + " mt/st").c_str(), ratio, k_chain_limit, ratio <= k_chain_limit ? "ok" : "over",
                median(mt), median(st));
  }
  return 0;
}
