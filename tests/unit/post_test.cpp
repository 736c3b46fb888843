// weft/post.hpp: fire-and-forget tasks, their priority, and every error case.
#include <weft/post.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <latch>
#include <stdexcept>

namespace {

using weft_test::tracker;

struct observed {
  bool on_pool = false;
  unsigned prio = 99;
};

weft::task<void> observe(weft::executor& pool, observed& out, std::latch& done) {
  out.on_pool = pool.owns_current_thread();
  out.prio = weft::current_priority();
  done.count_down();
  co_return;
}

weft::task<int> counted_value(std::latch& done) {
  done.count_down();
  co_return 5;
}

weft::task<void> throws_then_signals(std::latch& done) {
  done.count_down();
  throw std::runtime_error("weft post_test: this exception is expected on stderr");
  co_return;
}

weft::task<void> marks(bool& ran, tracker) {
  ran = true;
  co_return;
}

// Posts `n` children to the pool it runs on, from one of its workers.
weft::task<void> post_from_inside(weft::executor& pool, std::latch& done, int n) {
  for (int i = 0; i < n; ++i) weft::post(pool, counted_value(done));
  co_return;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("post: the task runs on the pool at the given priority", "[post]", weft_test::executor_kinds) {
  observed seen[4];
  std::latch done{4};
  WEFT_TEST_EXECUTOR(pool);  // after what its tasks use: destroyed (and joined) first
  REQUIRE(pool.priorities() == 4);
  for (unsigned p = 0; p < 4; ++p) weft::post(pool, observe(pool, seen[p], done), p);
  done.wait();
  for (unsigned p = 0; p < 4; ++p) {
    CHECK(seen[p].on_pool);
    CHECK(seen[p].prio == p);
  }
}

TEMPLATE_LIST_TEST_CASE("post: default priority is 0; a task<T>'s value is discarded", "[post]",
                        weft_test::executor_kinds) {
  observed seen;
  std::latch done{2};
  WEFT_TEST_EXECUTOR(pool);
  weft::post(pool, observe(pool, seen, done));
  weft::post(pool, counted_value(done));
  done.wait();
  CHECK(seen.prio == 0);
}

TEMPLATE_LIST_TEST_CASE("post: from one of the pool's own workers", "[post]", weft_test::executor_kinds) {
  std::latch done{1'000};
  WEFT_TEST_EXECUTOR(pool);
  weft::post(pool, post_from_inside(pool, done, 1'000));
  done.wait();
}

TEMPLATE_LIST_TEST_CASE("post: an exception in the task is reported, never std::terminate", "[post]",
                        weft_test::executor_kinds) {
  std::latch thrown{1};
  std::latch after{1};
  WEFT_TEST_EXECUTOR(pool);
  weft::post(pool, throws_then_signals(thrown));
  thrown.wait();
  // The pool keeps working after the exception.
  weft::post(pool, counted_value(after));
  after.wait();
}

TEST_CASE("post: errors destroy the task without running it", "[post]") {
  std::atomic<int> live{0};
  bool ran = false;
  weft::thread_pool pool{{.threads = 1, .priorities = 2}};

  SECTION("priority out of range: std::out_of_range") {
    CHECK_THROWS_AS(weft::post(pool, marks(ran, tracker{live}), 2), std::out_of_range);
    CHECK_THROWS_AS(weft::post(pool, marks(ran, tracker{live}), ~0u), std::out_of_range);
  }
  SECTION("empty or moved-from task: std::logic_error") {
    CHECK_THROWS_AS(weft::post(pool, weft::task<void>{}), std::logic_error);
    auto t = marks(ran, tracker{live});
    auto keep = std::move(t);
    CHECK_THROWS_AS(weft::post(pool, std::move(t)), std::logic_error);
  }
  SECTION("pool shutting down: weft::shutdown_error") {
    weft_test::pool_in_shutdown p;
    CHECK_THROWS_AS(weft::post(p.pool(), marks(ran, tracker{live})), weft::shutdown_error);
    CHECK_THROWS_AS(weft::post(p.pool(), marks(ran, tracker{live}), 1), weft::shutdown_error);
    p.finish();
    CHECK(p.probes_ran() == p.probes_accepted());
  }
  CHECK(live == 0);
  CHECK_FALSE(ran);
}
