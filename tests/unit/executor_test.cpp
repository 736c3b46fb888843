// weft/executor.hpp: current_executor, current_priority, check_priority, shutdown_error.
#include <weft/executor.hpp>

#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace {

weft::task<weft::executor*> where() { co_return weft::current_executor(); }
weft::task<unsigned> priority() { co_return weft::current_priority(); }
weft::task<bool> runs_on(weft::executor& ex) { co_return ex.owns_current_thread() && weft::current_executor() == &ex; }

weft::task<void> hold(weft_test::gate& started, const weft_test::gate& release) {
  started.open();
  release.wait();
  co_return;
}
weft::task<void> mark(std::mutex& m, std::vector<unsigned>& order, unsigned p) {
  std::lock_guard lock(m);
  order.push_back(p);
  co_return;
}

}  // namespace

static_assert(std::is_base_of_v<std::runtime_error, weft::shutdown_error>);
static_assert(std::is_base_of_v<weft::executor, weft::thread_pool>);

TEST_CASE("current_executor and current_priority on a plain thread", "[executor]") {
  CHECK(weft::current_executor() == nullptr);
  CHECK(weft::current_priority() == 0);
}

TEMPLATE_LIST_TEST_CASE("current_executor is the pool running the task", "[executor]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool other{{.threads = 1}};
  CHECK(weft::sync_wait(pool, where()) == &pool);
  CHECK(weft::sync_wait(other, where()) == &other);
  CHECK(weft::current_executor() == nullptr);
}

TEMPLATE_LIST_TEST_CASE("current_priority is the priority the task was queued at", "[executor]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  REQUIRE(pool.priorities() == 4);
  for (unsigned p = 0; p < pool.priorities(); ++p) CHECK(weft::sync_wait(pool, priority(), p) == p);
}

TEMPLATE_LIST_TEST_CASE("an executor runs sync_wait's task on its own thread; a bad priority throws", "[executor]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  CHECK_FALSE(ex.owns_current_thread());
  CHECK(weft::sync_wait(ex, runs_on(ex)));
  CHECK(weft::sync_wait(ex, runs_on(ex), ex.priorities() - 1));
  CHECK_THROWS_AS(weft::sync_wait(ex, runs_on(ex), ex.priorities()), std::out_of_range);
  CHECK_THROWS_AS(weft::post(ex, runs_on(ex), ex.priorities()), std::out_of_range);
}

TEMPLATE_LIST_TEST_CASE("queued tasks run highest priority first", "[executor]", weft_test::single_thread_kinds) {
  WEFT_TEST_EXECUTOR(ex);
  REQUIRE(ex.priorities() == 4);
  weft_test::gate started, release;
  std::mutex m;
  std::vector<unsigned> order;
  weft::post(ex, hold(started, release));
  started.wait();  // its only thread is held: everything below queues up
  for (unsigned p : {3u, 1u, 2u, 0u, 3u, 0u}) weft::post(ex, mark(m, order, p), p);
  release.open();
  weft::sync_wait(ex, mark(m, order, 3), 3);  // queued last at the lowest priority: runs last
  CHECK(order == std::vector<unsigned>{0, 0, 1, 2, 3, 3, 3});
}

TEST_CASE("check_priority accepts 0..priorities()-1 and throws std::out_of_range naming the caller", "[executor]") {
  weft::thread_pool pool{{.threads = 1, .priorities = 3}};
  CHECK_NOTHROW(weft::check_priority(pool, 0, "test"));
  CHECK_NOTHROW(weft::check_priority(pool, 2, "test"));
  CHECK_THROWS_AS(weft::check_priority(pool, 3, "test"), std::out_of_range);
  CHECK_THROWS_AS(weft::check_priority(pool, ~0u, "test"), std::out_of_range);
  try {
    weft::check_priority(pool, 7, "my_caller");
    FAIL("no exception");
  } catch (const std::out_of_range& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("my_caller"));
  }
}
