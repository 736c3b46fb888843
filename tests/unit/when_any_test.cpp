// weft/when_any.hpp: the first finisher wins, losers are asked to stop and waited for,
// exceptions, void operands, the range form, nothing leaks.
#include <weft/when_any.hpp>

#include <weft/channel.hpp>
#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/scope.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

// Counts, in its destructor, that the operand holding it finished, however it ended.
struct count_on_exit {
  std::atomic<int>& n;
  ~count_on_exit() { n.fetch_add(1); }
};

// Waits until asked to stop through `st` (the pattern for code that watches a token of
// its own: a stop_callback that sets the event the task waits on), then counts that it
// finished. The event wait also watches when_any's own token, stopped at the same
// time, so it may end with weft::cancelled instead: either way the operand finished.
weft::task<int> wait_for_stop(std::stop_token st, std::atomic<int>& stopped, weft_test::tracker) {
  const count_on_exit count{stopped};
  weft::manual_reset_event cancelled;
  std::stop_callback on_stop(st, [&] { cancelled.set(); });
  co_await cancelled.wait();
  co_return -1;
}

weft::task<std::string> quick(std::string s, weft_test::tracker) { co_return s; }

weft::task<int> fails() {
  throw std::runtime_error("first and failing");
  co_return 0;
}

weft::task<void> nothing() { co_return; }

}  // namespace

TEMPLATE_LIST_TEST_CASE("when_any: the first to finish wins and the losers are stopped", "[when_any]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> live{0}, stopped{0};
  auto body = [&]() -> weft::task<void> {
    std::stop_source stop;
    auto r = co_await weft::when_any(stop, wait_for_stop(stop.get_token(), stopped, weft_test::tracker{live}),
                                     quick("won", weft_test::tracker{live}),
                                     wait_for_stop(stop.get_token(), stopped, weft_test::tracker{live}));
    CHECK(r.index == 1);
    CHECK(std::get<1>(r.value) == "won");
    CHECK(stop.stop_requested());
    CHECK(stopped.load() == 2);  // both losers finished before when_any returned
  };
  weft::sync_wait(pool, body());
  CHECK(live.load() == 0);  // every frame is gone
}

TEST_CASE("when_any: the winner's exception is rethrown; void operands give monostate", "[when_any]") {
  weft::thread_pool pool{{.threads = 2}};
  auto throwing = [&]() -> weft::task<void> {
    std::stop_source stop;
    std::atomic<int> stopped{0}, live{0};
    CHECK_THROWS_WITH(
        co_await weft::when_any(stop, fails(), wait_for_stop(stop.get_token(), stopped, weft_test::tracker{live})),
        "first and failing");
    CHECK(stopped.load() == 1);
  };
  weft::sync_wait(pool, throwing());
  auto voids = [&]() -> weft::task<void> {
    auto r = co_await weft::when_any(nothing());
    CHECK(r.index == 0);
    CHECK(std::holds_alternative<std::monostate>(r.value));
  };
  weft::sync_wait(pool, voids());
}

TEST_CASE("when_any: range form over tasks of one type", "[when_any]") {
  weft::thread_pool pool{{.threads = 2}};
  std::atomic<int> live{0}, stopped{0};
  auto body = [&]() -> weft::task<void> {
    std::stop_source stop;
    std::vector<weft::task<int>> ts;
    for (int i = 0; i < 4; ++i) ts.push_back(wait_for_stop(stop.get_token(), stopped, weft_test::tracker{live}));
    ts.push_back([]() -> weft::task<int> { co_return 42; }());
    auto r = co_await weft::when_any(stop, std::move(ts));
    CHECK(r.index == 4);
    CHECK(r.value == 42);
    CHECK(stopped.load() == 4);
  };
  weft::sync_wait(pool, body());
  CHECK(live.load() == 0);
  auto empty = []() -> weft::task<void> { co_await weft::when_any(std::vector<weft::task<int>>{}); };
  CHECK_THROWS_AS(weft::sync_wait(pool, empty()), std::invalid_argument);
}

TEST_CASE("when_any: plain awaitables race tasks; a stop_callback cancels a waiting operand", "[when_any]") {
  weft::thread_pool pool{{.threads = 2}};
  std::atomic<int> live{0};
  auto body = [&]() -> weft::task<void> {
    std::stop_source stop;
    weft::manual_reset_event never_set;
    std::stop_callback cancel(stop.get_token(), [&] { never_set.set(); });  // how the loser ends
    auto r = co_await weft::when_any(stop, never_set.wait(), quick("task", weft_test::tracker{live}));
    CHECK(r.index == 1);
    CHECK(std::get<1>(r.value) == "task");
    CHECK(never_set.is_set());
  };
  weft::sync_wait(pool, body());
  CHECK(live.load() == 0);
}

namespace {

// An operand whose move constructor throws once it was moved `moves_ok` times: when_any
// fails while starting it (moving it into its forked child), after the operands before
// it were already forked.
struct fragile_operand {
  weft::task<int> t;
  int moves_ok = 0;
  fragile_operand(weft::task<int> tt, int ok) : t(std::move(tt)), moves_ok(ok) {}
  fragile_operand(fragile_operand&& o) : moves_ok(o.moves_ok - 1) {
    if (o.moves_ok == 0) throw std::runtime_error("operand move failed");
    t = std::move(o.t);
  }
  auto operator co_await() && { return std::move(t).operator co_await(); }
};

// Runs until a stop is requested, then records that it finished.
weft::task<int> until_stopped(std::stop_token tok, std::atomic<int>& finished) {
  while (!tok.stop_requested()) std::this_thread::yield();
  finished.fetch_add(1);
  co_return 0;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("when_any: an operand that fails to start: the started ones stop and finish first",
                        "[when_any]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> finished{0};
  SECTION("range form") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& fin) -> weft::task<int> {
                                        std::stop_source stop;
                                        std::vector<fragile_operand> ops;
                                        ops.reserve(3);
                                        // Moved once into its child: the third fails there.
                                        ops.emplace_back(until_stopped(stop.get_token(), fin), 9);
                                        ops.emplace_back(until_stopped(stop.get_token(), fin), 9);
                                        ops.emplace_back(until_stopped(stop.get_token(), fin), 0);
                                        auto r = co_await weft::when_any(stop, std::move(ops));
                                        co_return static_cast<int>(r.index);
                                      }(finished)),
                      "operand move failed");
    CHECK(finished == 2);  // both started operands finished before when_any threw
  }
  SECTION("variadic form") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& fin) -> weft::task<int> {
                                        std::stop_source stop;
                                        // Moved twice on the way in (when_any's coroutine
                                        // parameter and its frame copy), then into its child.
                                        auto r = co_await weft::when_any(
                                            stop, until_stopped(stop.get_token(), fin),
                                            fragile_operand(until_stopped(stop.get_token(), fin), 2));
                                        co_return static_cast<int>(r.index);
                                      }(finished)),
                      "operand move failed");
    // The first operand finished; the second never started (its frame was freed unrun).
    CHECK(finished == 1);
  }
}

namespace {

// How long a stop may take to end a wait before the test calls it a hang: far below
// k_wait_limit, since a shutdown that takes seconds is the defect these tests look for.
constexpr auto k_prompt = std::chrono::seconds(WEFT_SANITIZED ? 20 : 5);

// Polls `flag` until it is 1 (-> true) or k_prompt passed (-> false).
bool promptly(const std::atomic<int>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + k_prompt;
  while (flag.load(std::memory_order_acquire) != 1) {
    if (std::chrono::steady_clock::now() > deadline) return flag.load(std::memory_order_acquire) == 1;
    std::this_thread::yield();
  }
  return true;
}

// A scope child: races a pull of each channel; `got` is set when either gave a value.
weft::task<void> pull_either(weft::channel<int>& a, weft::channel<int>& b, std::atomic<int>& entered,
                             std::atomic<int>& got) {
  entered.store(1, std::memory_order_release);
  auto r = co_await weft::when_any(a.pull(), b.pull());
  std::visit([&](const std::optional<int>& v) { got.store(v ? 1 : 0, std::memory_order_relaxed); }, r.value);
}

weft::task<void> join_then_flag(weft::scope<>& s, std::atomic<int>& joined) {
  co_await s.join();
  joined.store(1, std::memory_order_release);
}

// Races a pull of each channel and reports the winner's index and value.
weft::task<void> race_pulls(weft::channel<int>& a, weft::channel<int>& b, std::atomic<std::size_t>& index,
                            std::atomic<int>& value, std::atomic<int>& done) {
  auto r = co_await weft::when_any(a.pull(), b.pull());
  index.store(r.index, std::memory_order_relaxed);
  std::visit([&](const std::optional<int>& v) { value.store(v ? *v : -1, std::memory_order_relaxed); }, r.value);
  done.store(1, std::memory_order_release);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("when_any: a scope's stop reaches operands waiting on empty channels", "[when_any][stop]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  for (const bool started_first : {false, true}) {
    INFO((started_first ? "stopped after the child started" : "stopped at once"));
    weft::channel<int> a, b;
    std::atomic<int> entered{0}, got{-1}, joined{0};
    weft::scope<> s;
    s.spawn(weft::spawn(pull_either(a, b, entered, got)).run_on(ex));
    if (started_first) {
      REQUIRE(weft_test::eventually([&] { return entered.load(std::memory_order_acquire) == 1; }));
      // Either order of the pulls parking and the stop is correct; the pause makes the
      // parked case (the one that hung) the likely one.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    s.request_stop();
    weft::post(ex, join_then_flag(s, joined));
    const bool prompt = promptly(joined);
    if (!prompt) {  // unblock the pulls so that the scope can be joined and destroyed
      a.close();
      b.close();
      REQUIRE(weft_test::eventually([&] { return joined.load(std::memory_order_acquire) == 1; }));
    }
    CHECK(prompt);
    CHECK(got.load() == 0);  // the winner was a stopped pull: nullopt
  }
}

TEMPLATE_LIST_TEST_CASE("when_any: a losing pull is stopped and takes nothing", "[when_any][channel]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  weft::channel<int> a, b;
  REQUIRE(a.try_push(1) == weft::channel_status::ok);
  std::atomic<std::size_t> index{99};
  std::atomic<int> value{0}, done{0};
  weft::post(ex, race_pulls(a, b, index, value, done));
  const bool prompt = promptly(done);
  CHECK(prompt);  // the loser (b, empty) was stopped once a won
  REQUIRE(b.try_push(7) == weft::channel_status::ok);
  REQUIRE(weft_test::eventually([&] { return done.load(std::memory_order_acquire) == 1; }));
  CHECK(index.load() == 0);
  CHECK(value.load() == 1);
  int left = 0;
  CHECK(b.try_pull(left) == weft::channel_status::ok);  // the loser did not take it
  CHECK(left == 7);
}

TEMPLATE_LIST_TEST_CASE("when_any: both pulls take an element: the loser's goes back", "[when_any][channel]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  for (int round = 0; round < 50; ++round) {
    weft::channel<int> a, b;
    REQUIRE(a.try_push(1) == weft::channel_status::ok);
    REQUIRE(a.try_push(3) == weft::channel_status::ok);
    REQUIRE(b.try_push(2) == weft::channel_status::ok);
    auto r = weft::sync_wait(ex, weft::when_any(a.pull(), b.pull()));
    REQUIRE(r.index < 2);
    const int won = std::visit([](const std::optional<int>& v) { return v.value_or(-1); }, r.value);
    CHECK(won == (r.index == 0 ? 1 : 2));
    // Every element not won is still there, in its channel's order.
    int x = 0;
    if (r.index == 0) {
      CHECK(a.try_pull(x) == weft::channel_status::ok);
      CHECK(x == 3);
      CHECK(b.try_pull(x) == weft::channel_status::ok);
      CHECK(x == 2);
    } else {
      CHECK(a.try_pull(x) == weft::channel_status::ok);
      CHECK(x == 1);
      CHECK(a.try_pull(x) == weft::channel_status::ok);
      CHECK(x == 3);
    }
    CHECK(a.size() + b.size() == 0);
  }
}
