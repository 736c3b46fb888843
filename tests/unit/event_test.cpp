// weft/event.hpp: manual_reset_event releases everyone, auto_reset_event exactly one
// per set() in FIFO order; no lost wake-ups when set() races the wait.
#include <weft/event.hpp>

#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"

#include <atomic>
#include <thread>

namespace {

using weft_test::eventually;

template <class Event>
weft::task<void> wait_and_record(Event& e, std::atomic<int>* slots, int id, std::atomic<int>& next) {
  co_await e.wait();
  slots[id].store(next.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_release);
}

}  // namespace

TEST_CASE("manual_reset_event: set releases every waiter, reset re-arms", "[event]") {
  weft::thread_pool pool{{.threads = 1}};
  weft::manual_reset_event e;
  CHECK_FALSE(e.is_set());
  constexpr int k_n = 5;
  std::atomic<int> slots[k_n] = {};
  std::atomic<int> next{0};
  for (int i = 0; i < k_n; ++i) weft::post(pool, wait_and_record(e, slots, i, next));
  std::atomic<int> thread_passed{0};
  std::thread t([&] {
    e.wait_blocking();
    thread_passed.store(1);
  });
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  CHECK(next.load() == 0);
  e.set();
  REQUIRE(eventually([&] { return next.load() == k_n && thread_passed.load() == 1; }));
  t.join();
  for (int i = 0; i < k_n; ++i) CHECK(slots[i].load() == i + 1);  // woken oldest first
  CHECK(e.is_set());
  e.wait_blocking();  // set: at once
  e.reset();
  CHECK_FALSE(e.is_set());
  weft::manual_reset_event initially{true};
  CHECK(initially.is_set());
}

TEST_CASE("auto_reset_event: one waiter per set, in FIFO order; a set with nobody waiting is kept", "[event]") {
  weft::thread_pool pool{{.threads = 1}};
  weft::auto_reset_event e;
  CHECK_FALSE(e.try_wait());
  e.set();
  e.set();  // coalesces: one signal
  CHECK(e.try_wait());
  CHECK_FALSE(e.try_wait());
  constexpr int k_n = 5;
  std::atomic<int> slots[k_n] = {};
  std::atomic<int> next{0};
  for (int i = 0; i < k_n; ++i) weft::post(pool, wait_and_record(e, slots, i, next));
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  for (int i = 0; i < k_n; ++i) {
    e.set();
    REQUIRE(eventually([&] { return slots[i].load(std::memory_order_acquire) != 0; }));
    REQUIRE(weft_test::drain_one_worker_pool(pool));
    CHECK(slots[i].load() == i + 1);
    CHECK(next.load() == i + 1);  // exactly one released per set
  }
  CHECK_FALSE(e.try_wait());  // every signal was consumed by a waiter
}

TEMPLATE_LIST_TEST_CASE("auto_reset_event: ping-pong between two tasks loses no wake-up", "[event]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::auto_reset_event ping, pong;
  constexpr int k_rounds = 5000;
  std::atomic<int> pongs{0};
  auto ponger = [&]() -> weft::task<void> {
    for (int i = 0; i < k_rounds; ++i) {
      co_await ping.wait();
      pongs.fetch_add(1, std::memory_order_relaxed);
      pong.set();
    }
  };
  auto pinger = [&]() -> weft::task<int> {
    auto p = weft::spawn(ponger()).fork();
    int rounds = 0;
    for (int i = 0; i < k_rounds; ++i) {
      ping.set();
      co_await pong.wait();
      ++rounds;
    }
    co_await p;
    co_return rounds;
  };
  CHECK(weft::sync_wait(pool, pinger()) == k_rounds);
  CHECK(pongs.load() == k_rounds);
}
