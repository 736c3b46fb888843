// weft/when_any.hpp: the first finisher wins, losers are asked to stop and waited for,
// exceptions, void operands, the range form, nothing leaks.
#include <weft/when_any.hpp>

#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

// Waits until asked to stop (the pattern for cancelling a wait: a stop_callback that
// sets the event the task waits on), then reports how it ended.
weft::task<int> wait_for_stop(std::stop_token st, std::atomic<int>& stopped, weft_test::tracker) {
  weft::manual_reset_event cancelled;
  std::stop_callback on_stop(st, [&] { cancelled.set(); });
  co_await cancelled.wait();
  stopped.fetch_add(1);
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
