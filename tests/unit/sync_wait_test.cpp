// weft/sync_wait.hpp: sync_wait and run: values, exceptions, priorities, misuse.
#include <weft/sync_wait.hpp>

#include <weft/pool.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

using weft_test::tracker;

weft::task<int> value_of(int v) { co_return v; }
weft::task<void> set(int& x, int v) {
  x = v;
  co_return;
}
weft::task<int&> ref_to(int& x) { co_return x; }
weft::task<std::unique_ptr<int>> boxed(int v) { co_return std::make_unique<int>(v); }
weft::task<int> throws_logic(std::string what) {
  throw std::domain_error(what);
  co_return 0;
}
weft::task<bool> on(weft::executor& pool) { co_return pool.owns_current_thread(); }
weft::task<unsigned> priority() { co_return weft::current_priority(); }
weft::task<weft::executor*> where() { co_return weft::current_executor(); }
weft::task<void> marks(bool& ran, tracker) {
  ran = true;
  co_return;
}

// sync_wait on the pool the caller runs on would deadlock: it must throw.
weft::task<bool> sync_wait_on_self(weft::thread_pool& pool) {
  try {
    (void)weft::sync_wait(pool, value_of(1));
  } catch (const std::logic_error&) {
    co_return true;
  }
  co_return false;
}

// Blocking a worker of one pool on another pool is allowed.
weft::task<int> sync_wait_elsewhere(weft::thread_pool& other) { co_return weft::sync_wait(other, value_of(9)) + 1; }

}  // namespace

TEMPLATE_LIST_TEST_CASE("sync_wait: returns the task's value, run on the executor", "[sync_wait]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, value_of(3)) == 3);
  CHECK(weft::sync_wait(pool, on(pool)));
  int x = 0;
  weft::sync_wait(pool, set(x, 4));
  CHECK(x == 4);
  CHECK(&weft::sync_wait(pool, ref_to(x)) == &x);
  auto p = weft::sync_wait(pool, boxed(6));
  REQUIRE(p);
  CHECK(*p == 6);
}

TEMPLATE_LIST_TEST_CASE("sync_wait: rethrows the task's exception", "[sync_wait]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK_THROWS_AS(weft::sync_wait(pool, throws_logic("x")), std::domain_error);
  CHECK_THROWS_WITH(weft::sync_wait(pool, throws_logic("message kept")), "message kept");
  CHECK(weft::sync_wait(pool, value_of(1)) == 1);  // the pool is fine afterwards
}

TEMPLATE_LIST_TEST_CASE("sync_wait: runs the task at the given priority", "[sync_wait]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, priority()) == 0);
  CHECK(weft::sync_wait(pool, priority(), 3) == 3);
}

TEST_CASE("sync_wait: errors", "[sync_wait]") {
  std::atomic<int> live{0};
  bool ran = false;
  weft::thread_pool pool{{.threads = 2, .priorities = 2}};

  SECTION("priority out of range: std::out_of_range, task not run") {
    CHECK_THROWS_AS(weft::sync_wait(pool, marks(ran, tracker{live}), 2), std::out_of_range);
  }
  SECTION("empty task: std::logic_error") {
    CHECK_THROWS_AS(weft::sync_wait(pool, weft::task<int>{}), std::logic_error);
  }
  SECTION("called on one of the executor's own threads: std::logic_error") {
    CHECK(weft::sync_wait(pool, sync_wait_on_self(pool)));
  }
  SECTION("executor shutting down: shutdown_error, task not run") {
    weft_test::pool_in_shutdown p;
    CHECK_THROWS_AS(weft::sync_wait(p.pool(), marks(ran, tracker{live})), weft::shutdown_error);
  }
  CHECK(live == 0);
  CHECK_FALSE(ran);
}

TEMPLATE_LIST_TEST_CASE("sync_wait: a worker of one pool may block on another", "[sync_wait]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool other{{.threads = 1}};
  CHECK(weft::sync_wait(pool, sync_wait_elsewhere(other)) == 10);
}

TEST_CASE("run: runs the task on the default pool", "[sync_wait][run]") {
  CHECK(weft::run(value_of(8)) == 8);
  CHECK(weft::run(where()) == &weft::default_pool());
  CHECK_THROWS_AS(weft::run(throws_logic("run")), std::domain_error);
  CHECK_THROWS_AS(weft::run(weft::task<int>{}), std::logic_error);
}
