// Priority ordering: with the only worker busy, queued work at priority 0 runs before
// queued work at priority 2, whether it was posted from outside or forked locally.
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <latch>
#include <thread>
#include <vector>

namespace {

using weft_test::gate;

// Appends its priority to `order`. Only one worker exists, so appends never race.
weft::task<void> record(std::vector<unsigned>& order, std::latch& done) {
  order.push_back(weft::current_priority());
  done.count_down();
  co_return;
}

bool zeros_before_twos(const std::vector<unsigned>& order) {
  bool seen_two = false;
  for (unsigned p : order) {
    if (p == 2) seen_two = true;
    if (p == 0 && seen_two) return false;
  }
  return true;
}

// Forks interleaved priority-2 and priority-0 children, detached, then returns.
weft::task<void> fork_interleaved(std::vector<unsigned>& order, std::latch& done, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) weft::spawn(record(order, done)).priority(i % 2 == 0 ? 2 : 0).detach();
  co_return;
}

}  // namespace

TEST_CASE("stress: posted work at priority 0 runs before priority 2 behind a busy worker", "[stress][priority]") {
  constexpr std::size_t k_tasks = 2'000;
  for (int round = 0; round < weft_test::rounds(50, 10); ++round) {
    std::vector<unsigned> order;
    order.reserve(k_tasks);
    std::latch done{static_cast<std::ptrdiff_t>(k_tasks)};
    gate started;
    gate release;
    weft::thread_pool pool{{.threads = 1, .priorities = 3}};
    weft::post(pool, weft_test::hold_worker(started, release), 1);
    started.wait();
    for (std::size_t i = 0; i < k_tasks; ++i) weft::post(pool, record(order, done), i % 2 == 0 ? 2 : 0);
    release.open();
    done.wait();
    REQUIRE(order.size() == k_tasks);
    REQUIRE(zeros_before_twos(order));
  }
}

TEST_CASE("stress: forked work at priority 0 runs before priority 2 on one worker", "[stress][priority]") {
  constexpr std::size_t k_tasks = 2'000;
  for (int round = 0; round < weft_test::rounds(50, 10); ++round) {
    std::vector<unsigned> order;
    order.reserve(k_tasks);
    std::latch done{static_cast<std::ptrdiff_t>(k_tasks)};
    weft::thread_pool pool{{.threads = 1, .priorities = 3}};
    weft::post(pool, fork_interleaved(order, done, k_tasks), 1);
    done.wait();
    REQUIRE(order.size() == k_tasks);
    REQUIRE(zeros_before_twos(order));
  }
}

namespace {

// Low-priority compute: fork-join fib(n), with every join a chance to notice urgent work.
weft::task<unsigned> busy_fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(busy_fib(n - 1)).fork();
  const unsigned b = co_await busy_fib(n - 2);
  co_return b + co_await a;
}

// Keeps one worker busy with fork-join work until `stop` is set or `limit` passes;
// counts itself in `started` first. Returns whether it was stopped (false: it gave up
// at the time limit).
weft::task<bool> compute_until(std::atomic<bool>& stop, std::chrono::steady_clock::time_point limit,
                               std::atomic<int>& started) {
  started.fetch_add(1, std::memory_order_release);
  while (!stop.load(std::memory_order_acquire)) {
    // The value first: g++-12.2 miscompiles `if (co_await x != v) co_return ...;` (the
    // condition's frame slot lands at offset 0 of the coroutine frame; the test hung).
    const unsigned got = co_await busy_fib(12);
    if (got != 144) co_return false;
    if (std::chrono::steady_clock::now() > limit) co_return false;
  }
  co_return true;
}

weft::task<void> set_flag(std::atomic<bool>& flag, unsigned& prio) {
  prio = weft::current_priority();
  flag.store(true, std::memory_order_release);
  co_return;
}

}  // namespace

TEST_CASE("stress: a high-priority post runs while every worker is busy with low-priority fork-join",
          "[stress][priority]") {
  // Without the announcement (worker_context::m_inline_limit) the probe would sit in an
  // inbox until a worker ran out of low-priority work, i.e. until the time limit.
  for (int round = 0; round < weft_test::rounds(20, 4); ++round) {
    weft::thread_pool pool{{.threads = 2, .priorities = 2}};
    std::atomic<bool> probe_ran{false};
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::vector<std::thread> busy;
    std::atomic<int> stopped{0};
    std::atomic<int> computing{0};
    for (int i = 0; i < 2; ++i) {
      busy.emplace_back([&] {
        if (weft::sync_wait(pool, compute_until(probe_ran, limit, computing), 1)) stopped.fetch_add(1);
      });
    }
    // Both compute loops run (and occupy the workers) before the probe is posted.
    CHECK(weft_test::eventually([&] { return computing.load(std::memory_order_acquire) == 2; }));
    unsigned probe_prio = 99;
    weft::post(pool, set_flag(probe_ran, probe_prio), 0);
    for (auto& t : busy) t.join();
    REQUIRE(probe_ran.load());
    REQUIRE(probe_prio == 0);
    REQUIRE(stopped.load() == 2);  // both loops saw the probe's flag before the time limit
  }
}

namespace {

weft::task<void> count_probe(std::atomic<int>& ran, int total, std::atomic<bool>& all_ran) {
  if (ran.fetch_add(1, std::memory_order_acq_rel) + 1 == total) all_ran.store(true, std::memory_order_release);
  co_return;
}

}  // namespace

TEST_CASE("stress: a burst of high-priority posts all run while workers stay busy with low-priority work",
          "[stress][priority]") {
  // One announcement can stand for many posts: the backlog must drain before the
  // low-priority work resumes, not one probe per later post.
  constexpr int k_probes = 64;
  for (int round = 0; round < weft_test::rounds(20, 4); ++round) {
    weft::thread_pool pool{{.threads = 2, .priorities = 2}};
    std::atomic<bool> all_ran{false};
    std::atomic<int> ran{0};
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::vector<std::thread> busy;
    std::atomic<int> stopped{0};
    std::atomic<int> computing{0};
    for (int i = 0; i < 2; ++i) {
      busy.emplace_back([&] {
        if (weft::sync_wait(pool, compute_until(all_ran, limit, computing), 1)) stopped.fetch_add(1);
      });
    }
    CHECK(weft_test::eventually([&] { return computing.load(std::memory_order_acquire) == 2; }));
    for (int i = 0; i < k_probes; ++i) weft::post(pool, count_probe(ran, k_probes, all_ran), 0);
    for (auto& t : busy) t.join();
    REQUIRE(ran.load() == k_probes);
    REQUIRE(stopped.load() == 2);
  }
}
