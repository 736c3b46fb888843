// weft/yield.hpp: yield_if_requested continues at once unless higher-priority work
// waits, and lets that work run first when it does.
#include <weft/yield.hpp>

#include <weft/pool.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"

#include <atomic>
#include <thread>

namespace {

weft::task<bool> yields_in_place(int n) {
  const auto me = std::this_thread::get_id();
  bool same = true;
  for (int i = 0; i < n; ++i) {
    co_await weft::yield_if_requested();
    same = same && std::this_thread::get_id() == me;
  }
  co_return same;
}

weft::task<void> raise(std::atomic<bool>& flag) {
  flag.store(true, std::memory_order_release);
  co_return;
}

struct yield_result {
  bool high_ran = false;
  long yields = 0;
};

// A low-priority task forks a priority-0 child, then yields until the child has run.
weft::task<yield_result> fork_high_then_yield() {
  std::atomic<bool> flag{false};
  auto h = weft::spawn(raise(flag)).priority(0).fork();
  yield_result r;
  constexpr long k_limit = 10'000'000;  // bounds the loop when yield never lets it run
  while (!flag.load(std::memory_order_acquire) && r.yields < k_limit) {
    co_await weft::yield_if_requested();
    ++r.yields;
  }
  r.high_ran = flag.load(std::memory_order_acquire);
  co_await h;
  co_return r;
}

}  // namespace

TEST_CASE("yield_if_requested: outside a pool worker it never suspends", "[yield]") {
  CHECK(weft::yield_if_requested().await_ready());
}

TEMPLATE_LIST_TEST_CASE("yield_if_requested: with nothing of higher priority waiting it continues at once", "[yield]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, yields_in_place(10'000), 3));
  CHECK(weft::sync_wait(pool, yields_in_place(10'000), 0));
}

// Pools only: yield_if_requested looks at a pool worker's queues; on an I/O executor's
// thread it never suspends (weft/yield.hpp).
TEMPLATE_LIST_TEST_CASE("yield_if_requested: higher-priority work waiting runs first", "[yield]",
                        weft_test::all_executors) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, fork_high_then_yield(), 2);
  CHECK(r.high_ran);
  if (TestType::k_threads == 1) CHECK(r.yields == 1);  // one worker: the yield must have run it
}
