// Async sync primitives under contention, tasks on two pools plus plain threads:
// mutual exclusion and FIFO hand-over of weft::mutex, permits of weft::semaphore,
// no lost wake-ups of auto_reset_event and latch, phases of weft::barrier. Run under
// ThreadSanitizer: the data guarded by the primitives is plain (non-atomic) memory.
#include <weft/barrier.hpp>
#include <weft/event.hpp>
#include <weft/fork_group.hpp>
#include <weft/latch.hpp>
#include <weft/mutex.hpp>
#include <weft/pool.hpp>
#include <weft/semaphore.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "sync.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace {

using weft_test::expect;

const int k_iterations = weft_test::rounds(20'000, 2'000);

// Runs `tasks_per_pool` copies of make() on each of two pools and `threads` copies of
// thread_body() on plain threads, all at once; returns when all finished.
template <class MakeTask, class ThreadBody>
void on_two_pools_and_threads(int tasks_per_pool, MakeTask make, int threads, ThreadBody thread_body) {
  weft::thread_pool a{{.threads = 2}}, b{{.threads = 2}};
  auto group = [&]() -> weft::task<void> {
    weft::fork_group<void> g;
    for (int i = 0; i < tasks_per_pool; ++i) g.fork(make());
    co_await g.join();
  };
  std::vector<std::thread> ts;
  ts.emplace_back([&] { weft::sync_wait(b, group()); });
  for (int i = 0; i < threads; ++i) ts.emplace_back(thread_body);
  weft::sync_wait(a, group());
  for (auto& t : ts) t.join();
}

weft::task<void> count_down_task(weft::latch& l) {
  l.count_down();
  co_return;
}

}  // namespace

TEST_CASE("sync stress: weft::mutex excludes tasks and threads", "[mutex][stress]") {
  weft_test::g_failures = 0;
  weft::mutex m;
  long plain = 0;  // TSan checks that every access is ordered by the mutex
  const int per = k_iterations / 10;
  on_two_pools_and_threads(
      3,
      [&]() -> weft::task<void> {
        for (int i = 0; i < per; ++i) {
          auto lock = co_await m.lock();
          ++plain;
        }
      },
      2,
      [&] {
        for (int i = 0; i < per; ++i) {
          if (auto lock = m.try_lock_scoped()) {
            ++plain;
            continue;
          }
          auto lock = m.lock_wait();
          ++plain;
        }
      });
  CHECK(plain == long{8} * per);
}

TEST_CASE("sync stress: weft::semaphore never exceeds its permits", "[semaphore][stress]") {
  weft_test::g_failures = 0;
  constexpr int k_permits = 2;
  weft::semaphore s{k_permits};
  std::atomic<int> holders{0};
  std::atomic<long> entries{0};
  const int per = k_iterations / 10;
  auto enter = [&] {
    expect(holders.fetch_add(1, std::memory_order_relaxed) < k_permits);
    entries.fetch_add(1, std::memory_order_relaxed);
    holders.fetch_sub(1, std::memory_order_relaxed);
  };
  on_two_pools_and_threads(
      3,
      [&]() -> weft::task<void> {
        for (int i = 0; i < per; ++i) {
          co_await s.acquire();
          enter();
          s.release();
        }
      },
      2,
      [&] {
        for (int i = 0; i < per; ++i) {
          s.acquire_wait();
          enter();
          s.release();
        }
      });
  CHECK(entries.load() == long{8} * per);
  CHECK(s.available() == k_permits);
  CHECK(weft_test::g_failures.load() == 0);
}

TEST_CASE("sync stress: auto_reset_event hand-over between a pool and a thread loses nothing", "[event][stress]") {
  weft::thread_pool pool{{.threads = 2}};
  weft::auto_reset_event to_task, to_thread;
  long shared = 0;  // written alternately by the task and the thread, ordered by the events
  auto task_side = [&]() -> weft::task<void> {
    for (int i = 0; i < k_iterations; ++i) {
      co_await to_task.wait();
      ++shared;
      to_thread.set();
    }
  };
  std::thread t([&] {
    for (int i = 0; i < k_iterations; ++i) {
      ++shared;
      to_task.set();
      to_thread.wait_blocking();
    }
  });
  weft::sync_wait(pool, task_side());
  t.join();
  CHECK(shared == 2L * k_iterations);
}

TEST_CASE("sync stress: latch and barrier rounds with racing arrivals", "[latch][barrier][stress]") {
  weft_test::g_failures = 0;
  const int rounds = weft_test::rounds(300, 40);
  constexpr int k_parties = 6;
  weft::barrier b{k_parties};
  std::atomic<int> in_phase[2] = {};
  on_two_pools_and_threads(
      2,
      [&]() -> weft::task<void> {
        for (int r = 0; r < rounds; ++r) {
          in_phase[r % 2].fetch_add(1, std::memory_order_relaxed);
          const std::size_t phase = co_await b.arrive_and_wait();
          expect(phase == static_cast<std::size_t>(r));
          expect(in_phase[r % 2].load(std::memory_order_relaxed) >= k_parties * (r / 2 + 1));
        }
      },
      2,
      [&] {
        for (int r = 0; r < rounds; ++r) {
          in_phase[r % 2].fetch_add(1, std::memory_order_relaxed);
          expect(b.arrive_and_wait_blocking() == static_cast<std::size_t>(r));
        }
      });
  CHECK(b.phase() == static_cast<std::size_t>(rounds));
  weft::thread_pool pool{{.threads = 2}};
  for (int r = 0; r < rounds; ++r) {
    weft::latch l{3};
    std::atomic<int> passed{0};
    std::thread counter([&] { l.count_down(); });
    auto waiter = [&]() -> weft::task<void> {
      weft::fork_group<void> g;
      g.fork(count_down_task(l));
      co_await l.wait();
      passed.fetch_add(1);
      co_await g.join();
    };
    std::thread waiter_thread([&] {
      l.count_down();
      l.wait_blocking();
      passed.fetch_add(1);
    });
    weft::sync_wait(pool, waiter());
    counter.join();
    waiter_thread.join();
    expect(passed.load() == 2);
  }
  CHECK(weft_test::g_failures.load() == 0);
}
