// weft/pool.hpp: construction, options, ownership of threads, default pool, shutdown.
#include <weft/pool.hpp>

#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>

namespace {

using weft_test::tracker;

weft::task<void> noop() { co_return; }

weft::task<bool> runs_on(weft::thread_pool& pool) { co_return pool.owns_current_thread(); }

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  auto b = co_await fib(n - 2);
  co_return co_await a + b;
}

// A posted task that forks a child before it finishes: both must run at shutdown.
weft::task<void> count_and_fork(std::atomic<std::size_t>& n, tracker t) {
  weft::spawn(weft_test::count_run(n, t)).detach();
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

} // namespace

TEST_CASE("thread_pool: invalid options throw std::invalid_argument", "[pool]") {
  CHECK_THROWS_AS(weft::thread_pool({.threads = 0}), std::invalid_argument);
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .priorities = 0}), std::invalid_argument);
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .priorities = 17}), std::invalid_argument);
}

TEST_CASE("thread_pool: reports its options", "[pool]") {
  SECTION("explicit") {
    weft::thread_pool pool{{.threads = 3, .priorities = 16}};
    CHECK(pool.thread_count() == 3);
    CHECK(pool.priorities() == 16);
  }
  SECTION("one priority level") {
    weft::thread_pool pool{{.threads = 1, .priorities = 1}};
    CHECK(pool.priorities() == 1);
    CHECK(weft::sync_wait(pool, fib(10)) == 55);
  }
  SECTION("defaults") {
    CHECK(weft::default_thread_count() >= 1);
    weft::thread_pool pool;
    CHECK(pool.thread_count() == weft::default_thread_count());
    CHECK(pool.priorities() == 4);
  }
}

TEMPLATE_LIST_TEST_CASE("thread_pool: owns its workers and nothing else", "[pool]", weft_test::all_executors) {
  auto pool = TestType::make();
  weft::thread_pool other{{.threads = 1}};
  CHECK(pool.thread_count() == TestType::k_threads);
  CHECK_FALSE(pool.owns_current_thread());
  CHECK(weft::sync_wait(pool, runs_on(pool)));
  CHECK_FALSE(weft::sync_wait(other, runs_on(pool)));
  CHECK_FALSE(weft::sync_wait(pool, runs_on(other)));
}

TEST_CASE("thread_pool: options that change scheduling keep results right", "[pool]") {
  SECTION("pinned workers") {
    weft::thread_pool pool{{.threads = 2, .pin = true}};
    CHECK(weft::sync_wait(pool, fib(20)) == 6765);
  }
  SECTION("no spinning: park at once") {
    weft::thread_pool pool{{.threads = 2, .spins = 0}};
    CHECK(weft::sync_wait(pool, fib(20)) == 6765);
  }
  SECTION("many priority levels") {
    weft::thread_pool pool{{.threads = 2, .priorities = 16}};
    CHECK(weft::sync_wait(pool, fib(20), 15) == 6765);
  }
}

TEST_CASE("default_pool: one process-wide pool with default options", "[pool]") {
  weft::thread_pool& a = weft::default_pool();
  weft::thread_pool& b = weft::default_pool();
  CHECK(&a == &b);
  CHECK(a.thread_count() == weft::default_thread_count());
  CHECK(weft::sync_wait(a, runs_on(a)));
  CHECK(weft::sync_wait(a, fib(15)) == 610);
}

TEMPLATE_LIST_TEST_CASE("thread_pool: destruction runs all queued work and what it spawns", "[pool]",
                        weft_test::all_executors) {
  constexpr std::size_t k_posts = 2'000;
  std::atomic<std::size_t> ran{0};
  std::atomic<int> live{0};
  {
    auto pool = TestType::make();
    for (std::size_t i = 0; i < k_posts; ++i)
      weft::post(pool, count_and_fork(ran, tracker{live}), static_cast<unsigned>(i % pool.priorities()));
  }
  CHECK(ran == 2 * k_posts);
  CHECK(live == 0);
}

TEST_CASE("thread_pool: a pool shutting down refuses posts from outside and still runs what it accepted",
          "[pool]") {
  weft_test::pool_in_shutdown p;
  CHECK_THROWS_AS(weft::post(p.pool(), noop()),
                  weft::shutdown_error);
  const std::size_t accepted = p.probes_accepted();
  p.finish();
  CHECK(p.probes_ran() == accepted);
  CHECK(p.probes_alive() == 0);
}
