// weft/executor.hpp: current_executor, current_priority, check_priority, shutdown_error.
#include <weft/executor.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace {

weft::task<weft::executor*> where() { co_return weft::current_executor(); }
weft::task<unsigned> priority() { co_return weft::current_priority(); }

}  // namespace

static_assert(std::is_base_of_v<std::runtime_error, weft::shutdown_error>);
static_assert(std::is_base_of_v<weft::executor, weft::thread_pool>);

TEST_CASE("current_executor and current_priority on a plain thread", "[executor]") {
  CHECK(weft::current_executor() == nullptr);
  CHECK(weft::current_priority() == 0);
}

TEMPLATE_LIST_TEST_CASE("current_executor is the pool running the task", "[executor]", weft_test::all_executors) {
  auto pool = TestType::make();
  weft::thread_pool other{{.threads = 1}};
  CHECK(weft::sync_wait(pool, where()) == &pool);
  CHECK(weft::sync_wait(other, where()) == &other);
  CHECK(weft::current_executor() == nullptr);
}

TEMPLATE_LIST_TEST_CASE("current_priority is the priority the task was queued at", "[executor]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  REQUIRE(pool.priorities() == 4);
  for (unsigned p = 0; p < pool.priorities(); ++p) CHECK(weft::sync_wait(pool, priority(), p) == p);
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
