// weft::with_timeout on io_pool workers: the deadline is armed in the worker's own queue
// (weft/detail/timer.hpp), fired by that worker as it polls or when its parked wait
// times out; the timer thread fires one that a busy worker leaves overdue; a deadline
// armed on one worker and removed from another thread; a deadline still armed when the
// pool shuts down.
#include <weft/event.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/resume_on.hpp>
#include <weft/scope.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>
#include <weft/timeout.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "deadline_shutdown.hpp"
#include "io_support.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>
#include <thread>

using namespace std::chrono_literals;

namespace {

// Waits on an event nobody sets until its token is stopped; records on which executor
// the stop arrived (null: a thread of no executor, such as the timer thread).
weft::task<void> wait_recording_stop(std::atomic<weft::executor*>& stopped_on, std::atomic<bool>& stopped) {
  const std::stop_token tok = co_await weft::this_task::stop_token();
  std::stop_callback cb(tok, [&] {
    stopped_on.store(weft::current_executor(), std::memory_order_relaxed);
    stopped.store(true, std::memory_order_release);
  });
  weft::manual_reset_event never;
  try {
    co_await never.wait();
  } catch (const weft::cancelled&) {
  }
}

// Computes without awaiting anything that suspends, polling its token, for at most
// `limit`: true when the token stopped it.
weft::task<bool> compute_until_stopped(std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (co_await weft::this_task::stop_requested()) co_return true;
  }
  co_return false;
}

// Moves to `other`, works there for about `spin`, and returns 1, or 2 when stopped first.
weft::task<int> hop_and_work(weft::thread_pool& other, std::chrono::microseconds spin) {
  co_await weft::resume_on(other);
  const auto end = std::chrono::steady_clock::now() + spin;
  while (std::chrono::steady_clock::now() < end) {
    if (co_await weft::this_task::stop_requested()) co_return 2;
  }
  co_return 1;
}

}  // namespace

TEST_CASE("io_pool timeout: a deadline fires on the worker that armed it, waking it from its parked wait",
          "[io][io_pool][timeout]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  // Each deadline is fired by the pool's own worker, parked in its ring with nothing else
  // to do; only a worker whose wake-up takes longer than the timer thread's grace (a
  // loaded, sanitized machine) leaves one to the timer thread, which must stay rare.
  int by_worker = 0;
  constexpr int k_rounds = 10;
  for (int i = 0; i < k_rounds; ++i) {
    std::atomic<weft::executor*> stopped_on{nullptr};
    std::atomic<bool> stopped{false};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = weft::sync_wait(*io, weft::with_timeout(wait_recording_stop(stopped_on, stopped), 30ms));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(r.ec == std::errc::timed_out);
    CHECK(stopped.load(std::memory_order_acquire));
    if (stopped_on.load(std::memory_order_relaxed) == &io->pool()) ++by_worker;
    CHECK(took >= 30ms);
    CHECK(took < 10s);
  }
  INFO(by_worker << " of " << k_rounds << " deadlines fired by the worker itself");
  CHECK(by_worker >= k_rounds / 2);  // before the worker queues: 0, the timer thread fired all
  if (by_worker < k_rounds) WARN(k_rounds - by_worker << " deadlines fell to the timer thread (a slow wake-up)");
}

TEST_CASE("io_pool timeout: a task that computes without awaiting is still stopped at its deadline",
          "[io][io_pool][timeout]") {
  // Its worker does not poll while the task runs: the timer thread fires the deadline.
  auto io = weft_io_test::make_io_pool_or_skip(1);
  if (!io) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = weft::sync_wait(*io, weft::with_timeout(compute_until_stopped(30s), 20ms));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.ec == std::errc::timed_out);
  CHECK(r.value == true);
  CHECK(took >= 20ms);
  CHECK(took < 10s);
}

TEST_CASE("io_pool timeout: deadlines armed on a worker, the task ending on another pool's thread",
          "[io][io_pool][timeout][stress]") {
  // Each deadline is armed in a worker's queue; the task moves to `other` and ends
  // there, so the removal comes from another thread, racing the worker's own firing
  // (or the timer thread's) of the same entry.
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  weft::thread_pool other{{.threads = 2}};
  const int rounds = weft_test::rounds(3'000, 300);
  int in_time = 0, late = 0, wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    auto r = weft::sync_wait(*io, weft::with_timeout(hop_and_work(other, std::chrono::microseconds(i % 40)),
                                                     std::chrono::microseconds((i * 7) % 40)));
    if (!r.value || (*r.value != 1 && *r.value != 2))
      ++wrong;
    else if (r.ec == std::errc::timed_out)
      ++late;
    else if (!r.ec && *r.value == 1)
      ++in_time;
    else
      ++wrong;  // stopped, yet no timeout reported
  }
  CHECK(wrong == 0);
  CHECK(in_time + late == rounds);
  WARN(in_time << " in time, " << late << " late of " << rounds);
}

namespace {

// One of many: a short deadline (fired, while the task computes) or a long one (removed).
weft::task<void> one_of_many(int i, std::atomic<int>& done, std::atomic<int>& timed_out) {
  const bool short_one = i % 3 == 0;
  const auto d = short_one ? std::chrono::microseconds(50 + i % 200) : std::chrono::microseconds(10'000'000);
  auto r = co_await weft::with_timeout(compute_until_stopped(short_one ? 5000ms : 0ms), d);
  if (r.ec == std::errc::timed_out) timed_out.fetch_add(1, std::memory_order_relaxed);
  done.fetch_add(1, std::memory_order_relaxed);
}

weft::task<void> many(int tasks, std::atomic<int>& done, std::atomic<int>& timed_out) {
  weft::scope<> all;
  for (int i = 0; i < tasks; ++i) all.spawn(one_of_many, i, std::ref(done), std::ref(timed_out));
  co_await all.join();
}

}  // namespace

TEST_CASE("io_pool timeout: many deadlines on every worker, most removed, some fired",
          "[io][io_pool][timeout][stress]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  const int tasks = weft_test::rounds(2'000, 200);
  std::atomic<int> done{0}, timed_out{0};
  weft::sync_wait(*io, many(tasks, done, timed_out));
  CHECK(done.load() == tasks);
  CHECK(timed_out.load() == (tasks + 2) / 3);  // exactly the short ones
}

TEST_CASE("io_pool timeout: a deadline that comes while its worker is held and the pool shuts down",
          "[io][io_pool][timeout]") {
  // The deadline is in worker 0's queue; that worker is held (it cannot poll) and the
  // pool's destructor refuses work: the timer thread fires the overdue deadline, the
  // woken task cannot be handed to the pool, and it is resumed on the timer thread
  // rather than ending the process.
  std::optional<weft::io::io_pool> pool;
  try {
    pool.emplace(weft::pool_options{.threads = 1}, weft_io_test::test_ring_options());
  } catch (const weft::io::uring_unavailable& e) {
    WARN("SKIPPED (io_uring unavailable): " << e.what());
    return;
  }
  weft_test::check_deadline_during_shutdown(pool->pool(), [&] { pool.reset(); });
}
