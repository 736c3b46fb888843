// weft/blocking.hpp: spawn_blocking over every executor kind: values, void, exceptions,
// resuming where the task awaited, many calls on a few threads, the queue limit, a stop
// before and during the call, and a pool's destruction with calls in flight.
#include <weft/blocking.hpp>

#include <weft/pool.hpp>
#include <weft/scope.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

namespace {

int add(int a, int b) { return a + b; }

// Blocks its thread until `release` opens; counts how many run at once.
void blocked(const weft_test::gate& release, std::atomic<int>& now, std::atomic<int>& most) {
  const int n = now.fetch_add(1) + 1;
  int seen = most.load();
  while (n > seen && !most.compare_exchange_weak(seen, n)) {
  }
  release.wait();
  now.fetch_sub(1);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("spawn_blocking: values, void, exceptions, and the task resumes where it awaited", "[blocking]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  weft::blocking_pool pool{{.max_threads = 2}};
  auto body = [&]() -> weft::task<bool> {
    weft::executor* const home = weft::current_executor();
    const auto caller = std::this_thread::get_id();
    std::thread::id ran_on;
    const int v = co_await weft::spawn_blocking(pool, add, 20, 22);
    const bool home_after_value = weft::current_executor() == home;
    co_await weft::spawn_blocking(pool, [&] { ran_on = std::this_thread::get_id(); });
    const std::string s = co_await weft::spawn_blocking(pool, [] { return std::string(100, 'x'); });
    bool threw = false;
    try {
      co_await weft::spawn_blocking(pool, []() -> int { throw std::runtime_error("from the blocking call"); });
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()) == "from the blocking call";
    }
    // By reference through std::ref: the call writes the caller's variable.
    int out = 0;
    co_await weft::spawn_blocking(pool, [](int& o) { o = 7; }, std::ref(out));
    co_return v == 42 &&
        home_after_value&& weft::current_executor() == home&& ran_on != caller&& ran_on != std::thread::id{} &&
        s.size() == 100 && threw&& out == 7;
  };
  CHECK(weft::sync_wait(ex, body()));
}

TEST_CASE("spawn_blocking: many calls on a few threads, all run, at most max_threads at once", "[blocking]") {
  weft::thread_pool workers{{.threads = 2}};
  weft::blocking_pool pool{{.max_threads = 3}};
  std::atomic<int> now{0}, most{0}, done{0};
  weft_test::gate release;
  constexpr int k_calls = 40;
  std::thread opener([&] {
    // Once the three threads are all blocked, the other calls wait in the queue.
    REQUIRE(weft_test::eventually([&] { return now.load() == 3 && pool.queued() == k_calls - 3; }));
    release.open();
  });
  weft::sync_wait(workers, [&]() -> weft::task<void> {
    weft::scope<> all;
    for (int i = 0; i < k_calls; ++i) {
      all.spawn(
          [](weft::blocking_pool& p, const weft_test::gate& r, std::atomic<int>& n, std::atomic<int>& m,
             std::atomic<int>& d) -> weft::task<void> {
            co_await weft::spawn_blocking(p, blocked, std::cref(r), std::ref(n), std::ref(m));
            d.fetch_add(1);
          },
          std::ref(pool), std::cref(release), std::ref(now), std::ref(most), std::ref(done));
    }
    co_await all.join();
  }());
  opener.join();
  CHECK(done.load() == k_calls);
  CHECK(most.load() == 3);
  CHECK(pool.thread_count() <= 3);
}

TEST_CASE("spawn_blocking: a full queue refuses the call with blocking_rejected, running nothing", "[blocking]") {
  weft::thread_pool workers{{.threads = 1}};
  weft::blocking_pool pool{{.max_threads = 1, .max_queued = 2}};
  std::atomic<int> now{0}, most{0}, ran{0};
  weft_test::gate release;
  auto outcome = weft::sync_wait(workers, [&]() -> weft::task<std::string> {
    weft::scope<> held;
    held.spawn(
        [](weft::blocking_pool& p, const weft_test::gate& r, std::atomic<int>& n, std::atomic<int>& m)
            -> weft::task<void> { co_await weft::spawn_blocking(p, blocked, std::cref(r), std::ref(n), std::ref(m)); },
        std::ref(pool), std::cref(release), std::ref(now), std::ref(most));
    while (now.load() != 1)
      co_await weft::spawn_blocking(weft::default_blocking_pool(), [] { std::this_thread::yield(); });
    for (int i = 0; i < 2; ++i)  // the two calls the queue holds
      held.spawn(
          [](weft::blocking_pool& p, std::atomic<int>& r) -> weft::task<void> {
            co_await weft::spawn_blocking(p, [&r] { r.fetch_add(1); });
          },
          std::ref(pool), std::ref(ran));
    while (pool.queued() != 2)
      co_await weft::spawn_blocking(weft::default_blocking_pool(), [] { std::this_thread::yield(); });
    std::string what;
    try {
      co_await weft::spawn_blocking(pool, [&] { ran.fetch_add(100); });
    } catch (const weft::blocking_rejected& e) {
      what = e.what();
    }
    release.open();
    co_await held.join();
    co_return what;
  }());
  CHECK(outcome.find("max_queued") != std::string::npos);
  CHECK(ran.load() == 2);  // the refused call never ran
}

namespace {

weft::task<bool> hold_pool(weft::blocking_pool& p, const weft_test::gate& r, std::atomic<int>& n, std::atomic<int>& m) {
  co_await weft::spawn_blocking(p, blocked, std::cref(r), std::ref(n), std::ref(m));
  co_return true;  // delivered, although the stop came while it ran
}

weft::task<bool> set_flag_unless_cancelled(weft::blocking_pool& p, std::atomic<bool>& flag) {
  try {
    co_await weft::spawn_blocking(p, [&flag] { flag = true; });
  } catch (const weft::cancelled&) {
    co_return false;
  }
  co_return true;
}

// Yields the calling task's thread for a moment (through another pool).
weft::task<void> let_others_run() {
  co_await weft::spawn_blocking(weft::default_blocking_pool(), [] { std::this_thread::yield(); });
}

}  // namespace

TEST_CASE("spawn_blocking: a stop withdraws a call still queued; a running call finishes", "[blocking]") {
  weft::thread_pool workers{{.threads = 2}};
  weft::blocking_pool pool{{.max_threads = 1}};
  std::atomic<int> now{0}, most{0};
  std::atomic<bool> queued_ran{false};
  weft_test::gate release;
  std::stop_source stop;
  auto [first, second] =
      weft::sync_wait(workers, [&]() -> weft::task<std::pair<std::optional<bool>, std::optional<bool>>> {
        weft::scope<bool> sc{stop.get_token()};
        // Holds the pool's one thread, so that the next call waits in the queue.
        sc.spawn(hold_pool, std::ref(pool), std::cref(release), std::ref(now), std::ref(most));
        while (now.load() != 1) co_await let_others_run();
        sc.spawn(set_flag_unless_cancelled, std::ref(pool), std::ref(queued_ran));
        while (pool.queued() != 1) co_await let_others_run();
        sc.request_stop();
        // The queued call ends at once, withdrawn, while the running one still runs.
        auto a = co_await sc.next();
        release.open();
        auto b = co_await sc.next();
        co_await sc.join();
        co_return std::pair{a, b};
      }());
  CHECK(first == false);  // the withdrawn call's child: cancelled
  CHECK(second == true);  // the running call's child: its result delivered
  CHECK_FALSE(queued_ran.load());
}

TEST_CASE("spawn_blocking: a token stopped before the call runs nothing", "[blocking]") {
  weft::thread_pool workers{{.threads = 1}};
  std::atomic<bool> ran{false};
  std::stop_source stop;
  stop.request_stop();
  const bool cancelled = weft::sync_wait(workers, [&]() -> weft::task<bool> {
    weft::scope<bool> sc{stop.get_token()};
    sc.spawn(
        [](std::atomic<bool>& r) -> weft::task<bool> {
          try {
            co_await weft::spawn_blocking([&r] { r = true; });
          } catch (const weft::cancelled&) {
            co_return true;
          }
          co_return false;
        },
        std::ref(ran));
    auto v = co_await sc.next();
    co_await sc.join();
    co_return v.value_or(false);
  }());
  CHECK(cancelled);
  CHECK_FALSE(ran.load());
}

TEST_CASE("spawn_blocking: bad options, and a pool destroyed with calls queued runs them first", "[blocking]") {
  CHECK_THROWS_AS(weft::blocking_pool(weft::blocking_options{.max_threads = 0}), std::invalid_argument);
  weft::thread_pool workers{{.threads = 2}};
  std::atomic<int> ran{0};
  {
    auto pool = std::make_unique<weft::blocking_pool>(weft::blocking_options{.max_threads = 1, .keep_alive = 1ms});
    weft::sync_wait(workers, [&]() -> weft::task<void> {
      weft::scope<> all;
      for (int i = 0; i < 20; ++i)
        all.spawn(
            [](weft::blocking_pool& p, std::atomic<int>& r) -> weft::task<void> {
              co_await weft::spawn_blocking(p, [&r] {
                std::this_thread::sleep_for(100us);
                r.fetch_add(1);
              });
            },
            std::ref(*pool), std::ref(ran));
      co_await all.join();
    }());
    // Idle threads leave after keep_alive.
    CHECK(weft_test::eventually([&] { return pool->thread_count() == 0; }));
  }
  CHECK(ran.load() == 20);
}

TEST_CASE("spawn_blocking: concurrent calls from every worker (TSan stress)", "[blocking][stress]") {
  weft::thread_pool workers{{.threads = 4}};
  weft::blocking_pool pool{{.max_threads = 3, .keep_alive = 2ms}};
  const int calls = weft_test::rounds(20'000, 2'000);
  std::atomic<long> sum{0};
  std::atomic<int> completed{0};
  std::atomic<int> withdrawn{0};
  std::stop_source stop;
  weft::sync_wait(workers, [&]() -> weft::task<void> {
    weft::scope<> all{stop.get_token()};
    for (int i = 0; i < calls; ++i) {
      all.spawn(
          [](weft::blocking_pool& p, std::atomic<long>& s, std::atomic<int>& done, std::atomic<int>& gone, int k,
             int stop_after, std::stop_source& st) -> weft::task<void> {
            try {
              s.fetch_add(co_await weft::spawn_blocking(p, [k] { return k % 7 + 1; }));
              // Stop once three quarters have completed, whatever order the workers ran them in: the rest are
              // withdrawn or run, and none is lost.
              if (done.fetch_add(1) + 1 == stop_after) st.request_stop();
            } catch (const weft::cancelled&) {
              gone.fetch_add(1);
            }
          },
          std::ref(pool), std::ref(sum), std::ref(completed), std::ref(withdrawn), i, calls / 4 * 3, std::ref(stop));
    }
    co_await all.join();
  }());
  CHECK(completed.load() >= calls / 4 * 3);
  CHECK(completed.load() + withdrawn.load() == calls);
  CHECK(sum.load() >= completed.load());
}
