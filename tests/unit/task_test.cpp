// weft/task.hpp: laziness, value and exception propagation, ownership, misuse, depth.
#include <weft/task.hpp>

#include <weft/sync_wait.hpp>
#include <weft/yield.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using weft_test::tracker;

weft::task<int> value_of(int v) { co_return v; }

weft::task<void> bump(int& hits) {
  ++hits;
  co_return;
}

weft::task<int&> ref_to(int& x) { co_return x; }

weft::task<std::unique_ptr<std::string>> boxed(std::string s) { co_return std::make_unique<std::string>(std::move(s)); }

weft::task<int> throws_runtime(std::string what) {
  throw std::runtime_error(what);
  co_return 0;
}

weft::task<void> throws_int() {
  throw 7;
  co_return;
}

weft::task<int> holds(tracker) { co_return 1; }

weft::task<int> add_one(weft::task<int> inner) { co_return 1 + co_await std::move(inner); }

weft::task<std::thread::id> thread_of() { co_return std::this_thread::get_id(); }

// depth: one frame per level, each co_await'ed by its parent.
weft::task<std::size_t> chain(std::size_t n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await chain(n - 1);
}

template <class T>
weft::task<bool> await_throws_logic_error(weft::task<T>& t) {
  try {
    co_await t;
  } catch (const std::logic_error&) {
    co_return true;
  }
  co_return false;
}

}  // namespace

TEST_CASE("task: nothing runs until the task is awaited", "[task]") {
  int hits = 0;
  auto t = bump(hits);
  CHECK(hits == 0);
  CHECK(t.valid());
  auto pool = weft_test::pool_1::make();
  weft::sync_wait(pool, [](weft::task<void> inner) -> weft::task<void> { co_await std::move(inner); }(std::move(t)));
  CHECK(hits == 1);
}

TEMPLATE_LIST_TEST_CASE("task: co_await evaluates to the child's value", "[task]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("int") { CHECK(weft::sync_wait(pool, add_one(value_of(41))) == 42); }
  SECTION("nested awaits") { CHECK(weft::sync_wait(pool, add_one(add_one(add_one(value_of(0))))) == 3); }
  SECTION("void") {
    int hits = 0;
    weft::sync_wait(pool, [](int& h) -> weft::task<void> {
      co_await bump(h);
      co_await bump(h);
    }(hits));
    CHECK(hits == 2);
  }
  SECTION("reference: the same object, not a copy") {
    int x = 5;
    int* seen = weft::sync_wait(pool, [](int& target) -> weft::task<int*> { co_return &co_await ref_to(target); }(x));
    CHECK(seen == &x);
  }
  SECTION("move-only value") {
    auto p = weft::sync_wait(pool, [](std::string s) -> weft::task<std::unique_ptr<std::string>> {
      co_return co_await boxed(std::move(s));
    }("weft"));
    REQUIRE(p != nullptr);
    CHECK(*p == "weft");
  }
  SECTION("many awaits in a loop") {
    auto sum = weft::sync_wait(pool, []() -> weft::task<long> {
      long s = 0;
      for (int i = 0; i < 100'000; ++i) s += co_await value_of(i);
      co_return s;
    }());
    CHECK(sum == 100'000L * 99'999 / 2);
  }
}

TEMPLATE_LIST_TEST_CASE("task: co_await runs the child inline on the awaiting thread", "[task]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto same = weft::sync_wait(pool, []() -> weft::task<bool> {
    auto before = std::this_thread::get_id();
    auto child = co_await thread_of();
    co_return child == before&& std::this_thread::get_id() == before;
  }());
  CHECK(same);
}

TEMPLATE_LIST_TEST_CASE("task: an exception reaches the awaiter", "[task]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("caught by the awaiting task") {
    auto what = weft::sync_wait(pool, []() -> weft::task<std::string> {
      try {
        co_await throws_runtime("boom");
      } catch (const std::runtime_error& e) {
        co_return e.what();
      }
      co_return "not thrown";
    }());
    CHECK(what == "boom");
  }
  SECTION("through two levels to sync_wait") {
    CHECK_THROWS_WITH(weft::sync_wait(pool, add_one(add_one(throws_runtime("deep")))), "deep");
  }
  SECTION("not derived from std::exception") { CHECK_THROWS_AS(weft::sync_wait(pool, throws_int()), int); }
  SECTION("the awaiter goes on after catching") {
    auto v = weft::sync_wait(pool, []() -> weft::task<int> {
      int caught = 0;
      for (int i = 0; i < 100; ++i) {
        try {
          co_await throws_runtime("again");
        } catch (const std::runtime_error&) {
          ++caught;
        }
      }
      co_return caught + co_await value_of(1);
    }());
    CHECK(v == 101);
  }
}

TEST_CASE("task: ownership", "[task]") {
  std::atomic<int> live{0};

  SECTION("destroying a task that never started frees its frame") {
    {
      auto t = holds(tracker{live});
      CHECK(live == 1);
    }
    CHECK(live == 0);
  }
  SECTION("move construction transfers the coroutine") {
    auto a = holds(tracker{live});
    auto b = std::move(a);
    CHECK_FALSE(a.valid());
    CHECK_FALSE(static_cast<bool>(a));
    CHECK(b.valid());
    CHECK(static_cast<bool>(b));
    CHECK(live == 1);
  }
  SECTION("move assignment frees the frame it replaces") {
    std::atomic<int> other{0};
    auto a = holds(tracker{live});
    auto b = holds(tracker{other});
    b = std::move(a);
    CHECK(other == 0);
    CHECK(live == 1);
    CHECK(b.valid());
    CHECK_FALSE(a.valid());
  }
  SECTION("a default-constructed task is empty") {
    weft::task<int> t;
    CHECK_FALSE(t.valid());
    CHECK_FALSE(static_cast<bool>(t));
  }
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("task: awaiting an empty, moved-from or finished task throws std::logic_error", "[task]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("default-constructed") {
    weft::task<int> t;
    CHECK(weft::sync_wait(pool, await_throws_logic_error(t)));
  }
  SECTION("moved-from") {
    auto t = value_of(1);
    auto keep = std::move(t);
    CHECK(weft::sync_wait(pool, await_throws_logic_error(t)));
  }
  SECTION("already awaited") {
    auto t = value_of(1);
    auto twice = weft::sync_wait(pool, [](weft::task<int>& awaited) -> weft::task<bool> {
      const bool first_ok = co_await awaited == 1;
      co_return first_ok&& co_await await_throws_logic_error(awaited);
    }(t));
    CHECK(twice);
  }
  SECTION("already awaited, void task") {
    int hits = 0;
    auto t = bump(hits);
    auto twice = weft::sync_wait(pool, [](weft::task<void>& awaited) -> weft::task<bool> {
      co_await awaited;
      co_return co_await await_throws_logic_error(awaited);
    }(t));
    CHECK(twice);
    CHECK(hits == 1);
  }
}

TEMPLATE_LIST_TEST_CASE("task: a 1,000,000-deep chain of co_awaits does not overflow the stack", "[task][depth]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, chain(1'000'000)) == 1'000'000);
}

namespace {
// Holds an object with a 64-byte-aligned member across a suspension, in a frame of
// about `Pad` bytes (over weft's 1 KiB cache limit for the largest).
struct line_aligned {
  alignas(64) std::uint64_t word = 0;
  std::uint64_t more[3] = {};
};
template <std::size_t Pad>
weft::task<bool> holds_aligned(std::uint64_t v) {
  line_aligned a;
  a.word = v;
  volatile unsigned char pad[Pad] = {};
  pad[0] = static_cast<unsigned char>(v);
  co_await weft::yield_if_requested();
  co_return reinterpret_cast<std::uintptr_t>(&a) % 64 == 0 && a.word == v&& pad[0] == static_cast<unsigned char>(v);
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("task: frames start on a 64-byte line, so over-aligned locals are honoured", "[task]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<int> {
    std::vector<weft::task<bool>> ts;
    for (std::uint64_t i = 0; i < 64; ++i) {
      ts.push_back(holds_aligned<8>(i));
      ts.push_back(holds_aligned<200>(i));
      ts.push_back(holds_aligned<2000>(i));
    }
    int bad = 0;
    for (auto& t : ts) {
      if (reinterpret_cast<std::uintptr_t>(weft::detail::task_handle(t).address()) % 64 != 0)
        ++bad;  // the frame itself
      if (!co_await t) ++bad;
    }
    co_return bad;
  }());
  CHECK(r == 0);
}

namespace {
weft::task<std::uint64_t> scaled(std::uint64_t v) { co_return v * 3 + 1; }  // v lives in the frame
}  // namespace

// Frames come from a per-thread frame stack (weft/detail/frame_allocator.hpp). A thread
// that exits hands its stack, frames still alive in it, to the next thread needing one:
// those frames must survive that thread's allocations, and be freeable from anywhere.
TEMPLATE_LIST_TEST_CASE("task: frames outlive the thread that made them", "[task]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  // More frames than one stack holds (each takes at least one granule), so that the
  // first thread's frames also overflow into its free lists.
  constexpr std::uint64_t k_n = weft::detail::k_frame_stack_bytes / weft::detail::k_frame_granule;
  std::vector<weft::task<std::uint64_t>> first, second;
  std::thread([&] {
    for (std::uint64_t i = 0; i < k_n; ++i) first.push_back(scaled(i));
  }).join();
  std::thread([&] {
    for (std::uint64_t i = 0; i < k_n; ++i) second.push_back(scaled(k_n + i));
    // Free some of each here, out of order and on top, on this other thread.
    for (std::uint64_t i = 0; i < k_n; i += 3) first[i] = {};
    for (std::uint64_t i = k_n; i-- > k_n / 2;) second[i] = {};
  }).join();
  for (std::uint64_t i = k_n / 2; i < k_n; ++i) second[i] = scaled(k_n + i);  // main thread's frames
  auto bad = weft::sync_wait(pool, [&]() -> weft::task<std::uint64_t> {
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < k_n; ++i) {
      if (first[i].valid() && co_await first[i] != i * 3 + 1) ++wrong;
      if (co_await second[i] != (k_n + i) * 3 + 1) ++wrong;
    }
    co_return wrong;
  }());
  CHECK(bad == 0);
}
