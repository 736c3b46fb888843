// weft/semaphore.hpp: permits, FIFO service, no more holders than permits, threads.
#include <weft/semaphore.hpp>

#include <weft/fork_group.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace {

using weft_test::eventually;
using weft_test::expect;

weft::task<void> acquire_and_record(weft::semaphore& s, std::atomic<int>* slots, int id, std::atomic<int>& next) {
  co_await s.acquire();
  slots[id].store(next.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_release);
}

}  // namespace

TEST_CASE("semaphore: try_acquire and release count permits", "[semaphore]") {
  weft::semaphore s{2};
  CHECK(s.available() == 2);
  CHECK(s.try_acquire());
  CHECK(s.try_acquire());
  CHECK_FALSE(s.try_acquire());
  s.release(3);
  CHECK(s.available() == 3);
  s.acquire_wait();
  CHECK(s.available() == 2);
}

TEST_CASE("semaphore: waiters are served in FIFO order, one per permit", "[semaphore]") {
  weft::thread_pool pool{{.threads = 1}};
  weft::semaphore s{0};
  constexpr int k_n = 6;
  std::atomic<int> slots[k_n] = {};
  std::atomic<int> next{0};
  for (int i = 0; i < k_n; ++i) weft::post(pool, acquire_and_record(s, slots, i, next));
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  for (int i = 0; i < k_n; ++i) {
    CHECK_FALSE(s.try_acquire());  // no barging past the waiters
    s.release();
    REQUIRE(eventually([&] { return slots[i].load(std::memory_order_acquire) != 0; }));
    REQUIRE(weft_test::drain_one_worker_pool(pool));
    CHECK(slots[i].load() == i + 1);  // the i-th waiter, and only it
    for (int j = i + 1; j < k_n; ++j) CHECK(slots[j].load() == 0);
  }
  CHECK(s.available() == 0);
}

TEMPLATE_LIST_TEST_CASE("semaphore: never more holders than permits", "[semaphore]", weft_test::executor_kinds) {
  weft_test::g_failures = 0;
  WEFT_TEST_EXECUTOR(pool);
  constexpr int k_permits = 3;
  weft::semaphore s{k_permits};
  std::atomic<int> holders{0}, max_holders{0};
  auto enter = [&] {
    const int now = holders.fetch_add(1) + 1;
    int seen = max_holders.load();
    while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
    }
    expect(now <= k_permits);
    holders.fetch_sub(1);
  };
  auto worker = [&]() -> weft::task<void> {
    for (int i = 0; i < 1500; ++i) {
      co_await s.acquire();
      enter();
      s.release();
    }
  };
  std::thread t([&] {
    for (int i = 0; i < 1500; ++i) {
      s.acquire_wait();
      enter();
      s.release();
    }
  });
  auto body = [&]() -> weft::task<void> {
    weft::fork_group<void> g;
    for (int i = 0; i < 6; ++i) g.fork(worker());
    co_await g.join();
  };
  weft::sync_wait(pool, body());
  t.join();
  CHECK(max_holders.load() <= k_permits);
  CHECK(max_holders.load() >= 1);
  CHECK(s.available() == k_permits);
  CHECK(weft_test::g_failures.load() == 0);
}
