// weft/timeout.hpp: with_timeout / with_deadline over tasks and awaitables: in time,
// late (the task's token is stopped and it returns), exceptions, the caller's token
// passed on, void tasks, and deadlines racing the task's own end.
#include <weft/timeout.hpp>

#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/scope.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "deadline_shutdown.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>

using namespace std::chrono_literals;

namespace {

weft::task<int> quick(int v) { co_return v; }

// Polls its token (yielding the thread) until stopped; -1 when it was, after `limit`
// polls 0 (never reached in these tests: the test would fail on the value).
weft::task<int> until_stopped(long limit) {
  for (long i = 0; i < limit; ++i) {
    if (co_await weft::this_task::stop_requested()) co_return -1;
    std::this_thread::yield();
  }
  co_return 0;
}

// Waits on an event nobody sets until the token is stopped, which cuts the wait short
// (weft::cancelled, caught here: the task then returns normally).
weft::task<void> wait_for_stop() {
  weft::manual_reset_event never;
  try {
    co_await never.wait();
  } catch (const weft::cancelled&) {
  }
}

weft::task<int> throws_after_stop() {
  co_await wait_for_stop();
  throw std::runtime_error("stopped");
}

// Works for about `spin` and returns 1; reports 2 when stopped first.
weft::task<int> works_for(std::chrono::microseconds spin) {
  const auto end = std::chrono::steady_clock::now() + spin;
  while (std::chrono::steady_clock::now() < end) {
    if (co_await weft::this_task::stop_requested()) co_return 2;
  }
  co_return 1;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("with_timeout: a task in time, a task late, exceptions", "[timeout]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("in time: the value, no error") {
    auto r = weft::sync_wait(pool, weft::with_timeout(quick(7), 10s));
    CHECK_FALSE(r.ec);
    CHECK(r.value == 7);
  }
  SECTION("late: the task's token is stopped, it returns, timed_out") {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = weft::sync_wait(pool, weft::with_timeout(until_stopped(1'000'000'000), 20ms));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(r.ec == std::errc::timed_out);
    CHECK(r.value == -1);
    CHECK(took >= 20ms);
    CHECK(took < 20s);
  }
  SECTION("late, void task waiting cooperatively") {
    auto r = weft::sync_wait(pool, weft::with_deadline(wait_for_stop(), std::chrono::steady_clock::now() + 5ms));
    CHECK(r.ec == std::errc::timed_out);
  }
  SECTION("a deadline already past stops the task at once") {
    auto r =
        weft::sync_wait(pool, weft::with_deadline(until_stopped(1'000'000'000), std::chrono::steady_clock::now() - 1s));
    CHECK(r.ec == std::errc::timed_out);
    CHECK(r.value == -1);
  }
  SECTION("the task's exception is rethrown, also after a timeout") {
    CHECK_THROWS_AS(weft::sync_wait(pool, weft::with_timeout(throws_after_stop(), 1ms)), std::runtime_error);
  }
  SECTION("an empty task is refused") {
    CHECK_THROWS_AS(weft::sync_wait(pool, weft::with_timeout(weft::task<int>{}, 1s)), std::logic_error);
  }
  SECTION("any awaitable: a plain awaiter") {
    struct ready_seven {
      bool await_ready() const noexcept { return true; }
      void await_suspend(std::coroutine_handle<>) const noexcept {}
      int await_resume() const noexcept { return 7; }
    };
    auto r = weft::sync_wait(pool, weft::with_timeout(ready_seven{}, 1s));
    CHECK_FALSE(r.ec);
    CHECK(r.value == 7);
  }
}

TEMPLATE_LIST_TEST_CASE("with_timeout: the caller's token still stops the task", "[timeout]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    weft::scope<weft::timeout_result<int>> s;
    s.spawn(weft::with_timeout(until_stopped(1'000'000'000), 1h));
    s.request_stop();
    auto v = co_await s.next();
    co_await s.join();
    co_return v.has_value() && !v->ec && v->value == -1;  // stopped by the scope, not the deadline
  }());
  CHECK(r);
}

TEST_CASE("with_timeout: deadlines racing the task's own end", "[timeout][stress]") {
  weft::thread_pool pool{{.threads = 4}};
  const int rounds = weft_test::rounds(2'000, 200);
  int in_time = 0;
  int late = 0;
  int wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    auto r = weft::sync_wait(pool, weft::with_timeout(works_for(std::chrono::microseconds(i % 50)),
                                                      std::chrono::microseconds((i * 7) % 50)));
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

TEST_CASE("with_timeout: a deadline that fires while the task's pool shuts down", "[timeout]") {
  std::optional<weft::thread_pool> pool;
  pool.emplace(weft::pool_options{.threads = 1});
  weft_test::check_deadline_during_shutdown(*pool, [&] { pool.reset(); });
}
