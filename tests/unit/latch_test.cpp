// weft/latch.hpp: waits complete exactly when the count reaches zero; tasks and threads.
#include <weft/latch.hpp>

#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

weft::task<void> wait_then_raise(weft::latch& l, std::atomic<int>& passed) {
  co_await l.wait();
  passed.fetch_add(1, std::memory_order_release);
}

}  // namespace

TEST_CASE("latch: count_down, try_wait and errors", "[latch]") {
  weft::latch l{2};
  CHECK_FALSE(l.try_wait());
  l.count_down();
  CHECK_FALSE(l.try_wait());
  CHECK_THROWS_AS(l.count_down(2), std::logic_error);
  CHECK_FALSE(l.try_wait());  // unchanged by the failed call
  l.count_down();
  CHECK(l.try_wait());
  l.wait_blocking();  // open: returns at once
  weft::latch open{0};
  CHECK(open.try_wait());
}

TEST_CASE("latch: waiting tasks and threads pass only at zero", "[latch]") {
  weft::thread_pool pool{{.threads = 1}};
  weft::latch l{3};
  std::atomic<int> passed{0};
  for (int i = 0; i < 5; ++i) weft::post(pool, wait_then_raise(l, passed));
  std::thread t([&] {
    l.wait_blocking();
    passed.fetch_add(1, std::memory_order_release);
  });
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  l.count_down(2);
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  CHECK(passed.load() == 0);
  l.count_down();
  REQUIRE(weft_test::eventually([&] { return passed.load(std::memory_order_acquire) == 6; }));
  t.join();
}

TEMPLATE_LIST_TEST_CASE("latch: no lost wake-up when the last count_down races the wait", "[latch]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  for (int round = 0; round < 300; ++round) {
    weft::latch l{1};
    std::atomic<int> passed{0};
    weft::post(pool, wait_then_raise(l, passed));
    l.count_down();
    REQUIRE(weft_test::eventually([&] { return passed.load(std::memory_order_acquire) == 1; }));
  }
}
