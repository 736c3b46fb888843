// weft/spawn_tuple.hpp: mixed result types, void slots, exceptions, misuse, recursion.
#include <weft/spawn_tuple.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>

namespace {

weft::task<int> value_of(int v) { co_return v; }
weft::task<std::string> text(std::string s) { co_return s; }
weft::task<std::unique_ptr<double>> boxed(double d) { co_return std::make_unique<double>(d); }
weft::task<void> increment(std::atomic<int>& n) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}
weft::task<int> counted_throw(std::string what, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  throw std::runtime_error(what);
  co_return 0;
}
weft::task<int> counted_value(int v, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  co_return v;
}

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto [a, b] = co_await weft::spawn_tuple(fib(n - 1), fib(n - 2));
  co_return a + b;
}

}  // namespace

// The result is a task of the tuple (with run_on), and converts to task<tuple> as before.
static_assert(std::is_same_v<decltype(weft::spawn_tuple(value_of(1), std::declval<weft::task<void>>())),
                             weft::tuple_task<std::tuple<int, std::monostate>>>);
static_assert(
    std::is_base_of_v<weft::task<std::tuple<int, std::monostate>>, weft::tuple_task<std::tuple<int, std::monostate>>>);
static_assert(std::is_convertible_v<weft::tuple_task<std::tuple<int, std::monostate>>&&,
                                    weft::task<std::tuple<int, std::monostate>>>);

TEMPLATE_LIST_TEST_CASE("spawn_tuple: a tuple of every child's result", "[spawn_tuple]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("mixed types") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto [i, s, p] = co_await weft::spawn_tuple(value_of(1), text("two"), boxed(3.0));
      co_return i == 1 && s == "two" && p && *p == 3.0;
    }());
    CHECK(r);
  }
  SECTION("void children give std::monostate") {
    std::atomic<int> n{0};
    auto r = weft::sync_wait(pool, [](std::atomic<int>& count) -> weft::task<int> {
      auto [a, b, c] = co_await weft::spawn_tuple(increment(count), value_of(5), increment(count));
      (void)a;
      (void)c;
      co_return b;
    }(n));
    CHECK(r == 5);
    CHECK(n == 2);
  }
  SECTION("a single child") {
    auto r = weft::sync_wait(pool, []() -> weft::task<int> {
      auto [v] = co_await weft::spawn_tuple(value_of(9));
      co_return v;
    }());
    CHECK(r == 9);
  }
  SECTION("fib(22) by recursive spawn_tuple") { CHECK(weft::sync_wait(pool, fib(22)) == 17711); }
}

TEMPLATE_LIST_TEST_CASE("spawn_tuple: the leftmost exception is rethrown after every child finished", "[spawn_tuple]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(weft::sync_wait(pool,
                                    [](std::atomic<int>& runs) -> weft::task<int> {
                                      auto [a, b, c, d] = co_await weft::spawn_tuple(
                                          counted_value(0, runs), counted_throw("second", runs), counted_value(2, runs),
                                          counted_throw("fourth", runs));
                                      co_return a + b + c + d;
                                    }(ran)),
                    "second");
  CHECK(ran == 4);
}

TEMPLATE_LIST_TEST_CASE("spawn_tuple: an empty task throws std::logic_error", "[spawn_tuple]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    try {
      (void)co_await weft::spawn_tuple(value_of(1), weft::task<int>{});
    } catch (const std::logic_error&) {
      co_return true;
    }
    co_return false;
  }());
  CHECK(r);
}
