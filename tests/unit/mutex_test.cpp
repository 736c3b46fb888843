// weft/mutex.hpp: mutual exclusion across tasks and threads, try_lock, scoped guards,
// FIFO service of waiters, resumption on the waiter's own executor.
#include <weft/mutex.hpp>

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

struct guarded {
  weft::mutex m;
  long counter = 0;            // only touched under m
  std::atomic<int> inside{0};  // must never exceed 1
  void critical() {
    expect(inside.fetch_add(1, std::memory_order_relaxed) == 0);
    ++counter;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
};

weft::task<void> add_many(guarded& g, int n) {
  for (int i = 0; i < n; ++i) {
    auto lock = co_await g.m.lock();
    expect(lock.owns_lock());
    g.critical();
  }
}

weft::task<void> lock_and_record(weft::mutex& m, std::vector<int>& order, int id, std::atomic<int>& done) {
  auto lock = co_await m.lock();
  order.push_back(id);  // under the mutex
  done.fetch_add(1, std::memory_order_release);
}

}  // namespace

TEST_CASE("mutex: try_lock, unlock and scoped guards", "[mutex]") {
  weft_test::g_failures = 0;
  weft::mutex m;
  CHECK(m.try_lock());
  CHECK_FALSE(m.try_lock());
  m.unlock();
  {
    auto g = m.try_lock_scoped();
    CHECK(g.owns_lock());
    CHECK(g.get() == &m);
    CHECK_FALSE(m.try_lock_scoped());
    auto moved = std::move(g);
    CHECK_FALSE(g.owns_lock());
    CHECK(moved.owns_lock());
  }
  CHECK(m.try_lock());  // the guard released it
  m.unlock();
  auto blocking = m.lock_wait();
  CHECK(blocking.owns_lock());
  blocking.unlock();
  CHECK_FALSE(blocking.owns_lock());
  CHECK(m.try_lock());
  m.unlock();
}

TEMPLATE_LIST_TEST_CASE("mutex: tasks and threads exclude each other", "[mutex]", weft_test::executor_kinds) {
  weft_test::g_failures = 0;
  WEFT_TEST_EXECUTOR(pool);
  guarded g;
  constexpr int k_tasks = 6, k_each = 2000, k_threads = 2;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < k_each; ++i) {
        auto lock = g.m.lock_wait();
        g.critical();
      }
    });
  auto body = [&]() -> weft::task<void> {
    weft::fork_group<void> fg;
    for (int t = 0; t < k_tasks; ++t) fg.fork(add_many(g, k_each));
    co_await fg.join();
  };
  weft::sync_wait(pool, body());
  for (auto& t : threads) t.join();
  CHECK(g.counter == long{k_tasks + k_threads} * k_each);
  CHECK(weft_test::g_failures.load() == 0);
}

TEST_CASE("mutex: waiters get the mutex in FIFO order", "[mutex]") {
  weft::thread_pool pool{{.threads = 1}};
  weft::mutex m;
  REQUIRE(m.try_lock());
  std::vector<int> order;
  std::atomic<int> done{0};
  constexpr int k_n = 8;
  for (int i = 0; i < k_n; ++i) weft::post(pool, lock_and_record(m, order, i, done));
  REQUIRE(weft_test::drain_one_worker_pool(pool));
  CHECK(done.load() == 0);
  CHECK_FALSE(m.try_lock());  // waiters queued: no barging
  m.unlock();
  REQUIRE(eventually([&] { return done.load(std::memory_order_acquire) == k_n; }));
  std::vector<int> expected;
  for (int i = 0; i < k_n; ++i) expected.push_back(i);
  auto lock = m.lock_wait();
  CHECK(order == expected);
}

TEST_CASE("mutex: a waiter resumes on its own executor", "[mutex]") {
  weft_test::g_failures = 0;
  weft::thread_pool a{{.threads = 1}}, b{{.threads = 1}};
  weft::mutex m;
  std::atomic<int> wrong{0};
  auto on = [&](weft::thread_pool& mine) -> weft::task<void> {
    for (int i = 0; i < 2000; ++i) {
      auto lock = co_await m.lock();
      if (!mine.owns_current_thread()) wrong.fetch_add(1);
    }
  };
  std::thread t([&] { weft::sync_wait(b, on(b)); });
  weft::sync_wait(a, on(a));
  t.join();
  CHECK(wrong.load() == 0);
}
