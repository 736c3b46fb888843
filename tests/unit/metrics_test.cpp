// weft/metrics.hpp: thread_pool::metrics() and io_pool::metrics() count what the workers
// did (tasks run and stolen, steal attempts, parks, busy and parked time, inbox depth,
// ring operations), snapshots may be taken from any thread while the pool works, and
// format_metrics() writes every documented name for every worker.
#include <catch2/catch.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/io/sleep.hpp>
#include <weft/metrics.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "bounded_wait.hpp"
#include "sync.hpp"

using namespace std::chrono_literals;

namespace {

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  auto b = co_await fib(n - 2);
  co_return co_await a + b;
}

weft::task<std::uint64_t> fib_task(unsigned n) { co_return co_await fib(n); }

weft::task<int> sleeps(weft::io::io_pool& io, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i)
    if (!co_await weft::io::sleep_for(io, 1ms)) ++ok;
  co_return ok;
}

weft::task<void> nothing() { co_return; }

}  // namespace

TEST_CASE("metrics: a new pool has run nothing, and its clocks add up", "[metrics]") {
  weft::thread_pool pool{{.threads = 2}};
  std::this_thread::sleep_for(20ms);
  const auto m = pool.metrics();
  REQUIRE(m.workers.size() == 2);
  CHECK(m.uptime >= 20ms);
  for (const auto& w : m.workers) {
    CHECK(w.tasks_run == 0);
    CHECK(w.tasks_stolen == 0);
    CHECK(w.inbox_depth == 0);
    CHECK(w.io_submitted == 0);
    CHECK(w.busy + w.parked <= m.uptime);
    CHECK(w.busy + w.parked >= m.uptime - 20ms);  // started within 20 ms of the pool
  }
  // Idle for 20 ms: each worker has parked, and most of its time was parked.
  CHECK(weft_test::eventually([&] {
    const auto now = pool.metrics();
    return now.workers[0].parks >= 1 && now.workers[1].parks >= 1 && now.total().parked > now.total().busy;
  }));
}

TEST_CASE("metrics: tasks run, stolen and steal attempts count fork-join work", "[metrics]") {
  weft::thread_pool pool{{.threads = 2}};
  // A second worker steals from the first as soon as there are forks to steal; repeat
  // until it has (on a loaded machine one run may end before the thief wakes).
  std::uint64_t result = 0;
  CHECK(weft_test::eventually([&] {
    result = weft::sync_wait(pool, fib_task(20));
    return pool.metrics().total().tasks_stolen > 0;
  }));
  CHECK(result == 6765);
  const auto m = pool.metrics();
  const auto t = m.total();
  CHECK(t.tasks_run >= 1);
  CHECK(t.tasks_stolen <= t.tasks_run);
  CHECK(t.steal_attempts >= t.tasks_stolen);
  CHECK(t.busy > 0ns);
  std::uint64_t per_worker = 0;
  for (const auto& w : m.workers) per_worker += w.tasks_run;
  CHECK(per_worker == t.tasks_run);  // total() is the sum
}

TEST_CASE("metrics: posts waiting behind a held worker show in its inbox depth", "[metrics]") {
  weft::thread_pool pool{{.threads = 1}};
  weft_test::gate started, release;
  weft::post(pool, weft_test::hold_worker(started, release));
  started.wait();
  constexpr int k_posts = 10;
  for (int i = 0; i < k_posts; ++i) weft::post(pool, nothing());
  CHECK(pool.metrics().workers[0].inbox_depth == k_posts);
  release.open();
  CHECK(weft_test::eventually([&] {
    const auto w = pool.metrics().workers[0];
    return w.inbox_depth == 0 && w.tasks_run >= 1 + k_posts;
  }));
}

TEST_CASE("metrics: an io_pool counts each ring's operations", "[metrics][io]") {
  std::optional<weft::io::io_pool> io;
  try {
    io.emplace(weft::pool_options{.threads = 2});
  } catch (const weft::io::uring_unavailable& e) {
    WARN("io_uring unavailable here: " << e.what());
    return;
  }
  CHECK(io->metrics().total().io_submitted == 0);
  constexpr int k_sleeps = 20;
  CHECK(weft::sync_wait(*io, sleeps(*io, k_sleeps)) == k_sleeps);
  // Every sleep is one timeout operation on the ring of the worker it ran on; the last
  // completion was reaped before its task resumed, so none is in flight.
  const auto t = io->metrics().total();
  CHECK(t.io_submitted >= k_sleeps);
  CHECK(t.io_completed == t.io_submitted);
  CHECK(t.io_in_flight == 0);
  CHECK(t.tasks_run >= 1);
}

TEST_CASE("metrics: snapshots from other threads and from workers while the pool works (TSan)", "[metrics][stress]") {
  weft::thread_pool pool{{.threads = 2}};
  std::atomic<bool> done{false};
  std::uint64_t last_run = 0;
  bool monotonic = true;
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const auto t = pool.metrics().total();
      monotonic = monotonic && t.tasks_run >= last_run;
      last_run = t.tasks_run;
      (void)weft::format_metrics(pool.metrics());
    }
  });
  const int runs = weft_test::rounds(20, 4);
  for (int i = 0; i < runs; ++i) {
    CHECK(weft::sync_wait(pool, fib_task(18)) == 2584);
    // From a worker: a task may look at its own pool.
    CHECK(weft::sync_wait(pool, [](weft::thread_pool& p) -> weft::task<std::size_t> {
            co_return p.metrics().workers.size();
          }(pool)) == 2);
  }
  done.store(true, std::memory_order_release);
  reader.join();
  CHECK(monotonic);
}

TEST_CASE("metrics: format_metrics writes every name for every worker", "[metrics]") {
  weft::pool_metrics m;
  m.uptime = 1500ms;
  m.workers.resize(3);
  m.workers[1].tasks_run = 42;
  m.workers[2].busy = 250ms;
  m.workers[0].io_in_flight = 7;
  const std::string text = weft::format_metrics(m);
  const char* names[] = {"tasks_run_total",    "tasks_stolen_total",   "steal_attempts_total", "parks_total",
                         "busy_seconds_total", "parked_seconds_total", "deque_depth",          "inbox_depth",
                         "io_submitted_total", "io_completed_total",   "io_in_flight"};
  CHECK(text.find("# TYPE weft_uptime_seconds gauge\n") != std::string::npos);
  CHECK(text.find("weft_uptime_seconds 1.5") != std::string::npos);
  for (const char* n : names) {
    INFO(n);
    CHECK(text.find(std::string("# TYPE weft_") + n + (std::string(n).ends_with("_total") ? " counter" : " gauge")) !=
          std::string::npos);
    for (int w = 0; w < 3; ++w)
      CHECK(text.find(std::string("weft_") + n + "{worker=\"" + std::to_string(w) + "\"} ") != std::string::npos);
  }
  CHECK(text.find("weft_tasks_run_total{worker=\"1\"} 42\n") != std::string::npos);
  CHECK(text.find("weft_busy_seconds_total{worker=\"2\"} 0.25") != std::string::npos);
  CHECK(text.find("weft_io_in_flight{worker=\"0\"} 7\n") != std::string::npos);
  // Every line is a comment or `name{labels} value` / `name value`.
  std::istringstream lines(text);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.starts_with("#")) continue;
    ++samples;
    CHECK(line.starts_with("weft_"));
    CHECK(line.find(' ') != std::string::npos);
  }
  CHECK(samples == 1 + 11 * 3);
  CHECK(m.total().tasks_run == 42);
  CHECK(m.total().busy == 250ms);
}
