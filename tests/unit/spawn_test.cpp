// weft/spawn.hpp: spawn with co_await, fork, detach, priority, run_on; fork_handle;
// exceptions at join; depth safety of fork recursion.
#include <weft/spawn.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using weft_test::tracker;

weft::task<int> value_of(int v) { co_return v; }
weft::task<std::thread::id> thread_of() { co_return std::this_thread::get_id(); }
weft::task<unsigned> priority() { co_return weft::current_priority(); }
weft::task<bool> on(weft::executor& ex) { co_return ex.owns_current_thread(); }
weft::task<void> increment(std::atomic<int>& n) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}
weft::task<int> throws_runtime(std::string what) {
  throw std::runtime_error(what);
  co_return 0;
}
weft::task<void> throws_void() {
  throw std::runtime_error("weft spawn_test: this exception is expected on stderr");
  co_return;
}
weft::task<void> holds(tracker, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  auto b = co_await fib(n - 2);
  co_return co_await a + b;
}

// Each level forks the next and joins it: n nested forks.
weft::task<std::size_t> fork_chain(std::size_t n) {
  if (n == 0) co_return 0;
  auto h = weft::spawn(fork_chain(n - 1)).fork();
  co_return 1 + co_await h;
}

// Each level co_awaits spawn of the next.
weft::task<std::size_t> spawn_chain(std::size_t n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await weft::spawn(spawn_chain(n - 1));
}

// fib as a function object: the callable form of spawn.
struct fib_fn {
  weft::task<std::uint64_t> operator()(unsigned n) const;
};
inline constexpr fib_fn fib_object{};
weft::task<std::uint64_t> fib_fn::operator()(unsigned n) const {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib_object, n - 1).fork();
  const std::uint64_t b = co_await weft::spawn(fib_object, n - 2);
  co_return co_await a + b;
}

// Each level co_awaits spawn(fn, args...) of the next.
weft::task<std::size_t> callable_chain(std::size_t n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await weft::spawn(callable_chain, n - 1);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("spawn(fn, args...): the callable form", "[spawn]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("a function object forked and awaited inline: fib(20)") {
    CHECK(weft::sync_wait(pool, fib_object(20)) == 6765);
  }
  SECTION("a plain function, a lambda, reference arguments, void") {
    std::atomic<int> n{0};
    auto r = weft::sync_wait(pool, [](std::atomic<int>& count) -> weft::task<bool> {
      const int v = co_await weft::spawn(value_of, 4);
      auto h = weft::spawn([] { return value_of(5); }).fork();
      auto inc = weft::spawn(increment, std::ref(count)).fork();
      co_await weft::spawn(increment, std::ref(count));
      co_await inc;
      co_return v == 4 && co_await h == 5;
    }(n));
    CHECK(r);
    CHECK(n == 2);
  }
  SECTION("priority, run_on and detach work as with spawn(task)") {
    std::atomic<int> live{0};
    std::atomic<int> ran{0};
    weft::thread_pool other{{.threads = 1}};
    {
      WEFT_TEST_EXECUTOR(local);
      auto r = weft::sync_wait(
          local,
          [](weft::thread_pool& there, std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<bool> {
            const unsigned awaited = co_await weft::spawn(priority).priority(0);
            auto h = weft::spawn(priority).priority(3).fork();
            const unsigned forked = co_await h;
            const bool ran_there = co_await weft::spawn(on, std::ref(there)).run_on(there);
            weft::spawn(holds, tracker{alive}, std::ref(runs)).detach();
            co_return awaited == 0 && forked == 3 && ran_there&& weft::current_priority() == 1;
          }(other, live, ran),
          1);
      CHECK(r);
    }  // the pool runs the detached child before it goes
    CHECK(ran == 1);
    CHECK(live == 0);
  }
  SECTION("exceptions: from fn itself (nothing queued) and from the child at its join") {
    auto r = weft::sync_wait(pool, []() -> weft::task<int> {
      int caught = 0;
      try {
        auto h = weft::spawn([]() -> weft::task<int> { throw std::runtime_error("fn failed"); }).fork();
      } catch (const std::runtime_error&) {
        ++caught;
      }
      auto h = weft::spawn(throws_runtime, "child failed").fork();
      try {
        (void)co_await h;
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "child failed") ++caught;
      }
      try {
        (void)co_await weft::spawn(throws_runtime, "inline failed");
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "inline failed") ++caught;
      }
      co_return caught;
    }());
    CHECK(r == 3);
  }
  SECTION("fn returning an empty task: std::logic_error") {
    const auto empty = [] { return weft::task<int>{}; };
    auto r = weft::sync_wait(pool, [](auto make_empty) -> weft::task<int> {
      int caught = 0;
      try {
        auto h = weft::spawn(make_empty).fork();
      } catch (const std::logic_error&) {
        ++caught;
      }
      try {
        (void)co_await weft::spawn(make_empty);
      } catch (const std::logic_error&) {
        ++caught;
      }
      co_return caught;
    }(empty));
    CHECK(r == 2);
  }
  SECTION("a 100,000-deep chain of co_await spawn(fn, args...)") {
    CHECK(weft::sync_wait(pool, callable_chain(100'000)) == 100'000);
  }
}

TEMPLATE_LIST_TEST_CASE("spawn: co_await runs the child inline and yields its value", "[spawn]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    const auto me = std::this_thread::get_id();
    const int v = co_await weft::spawn(value_of(4));
    const auto child = co_await weft::spawn(thread_of());
    co_return v == 4 && child == me;
  }());
  CHECK(r);
}

TEMPLATE_LIST_TEST_CASE("spawn: fork then co_await the handle", "[spawn]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("values") {
    auto sum = weft::sync_wait(pool, []() -> weft::task<int> {
      auto a = weft::spawn(value_of(1)).fork();
      auto b = weft::spawn(value_of(2)).fork();
      auto c = weft::spawn(value_of(3)).fork();
      const int z = co_await c;  // joined in any order
      const int x = co_await a;
      const int y = co_await b;
      co_return x * 100 + y * 10 + z;
    }());
    CHECK(sum == 123);
  }
  SECTION("void") {
    std::atomic<int> n{0};
    weft::sync_wait(pool, [](std::atomic<int>& count) -> weft::task<void> {
      auto a = weft::spawn(increment(count)).fork();
      auto b = weft::spawn(increment(count)).fork();
      co_await a;
      co_await b;
    }(n));
    CHECK(n == 2);
  }
  SECTION("fib(20)") { CHECK(weft::sync_wait(pool, fib(20)) == 6765); }
}

weft::task<int> value_held(int v, tracker) { co_return v; }
weft::task<std::string> text_of(std::size_t n) { co_return std::string(n, 'y'); }  // n > 15: on the heap
// A frame of some 450 bytes, far bigger than value_of's.
weft::task<int> sum_of(std::array<int, 100> v) { co_return std::accumulate(v.begin(), v.end(), 0); }
struct tracked_error : std::runtime_error {
  explicit tracked_error(std::atomic<int>& live) : std::runtime_error("tracked"), m_t(live) {}
  tracker m_t;
};
weft::task<int> throws_tracked(std::atomic<int>& live) {
  throw tracked_error(live);
  co_return 0;
}

// After a join (co_await of a handle or of spawn(...)) the child's frame is popped off
// the thread's frame stack when it is the top and nothing in it needs a destructor
// (weft/task.hpp, pop_finished_frame); these are the cases where it must not be, or
// where more than the frame must go.
TEMPLATE_LIST_TEST_CASE("spawn: a joined child's frame is freed exactly once, other frames kept", "[spawn]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("joins out of order, with frames made between the children") {
    auto r = weft::sync_wait(pool, []() -> weft::task<long> {
      long total = 0;
      for (int i = 0; i < 2000; ++i) {
        auto a = weft::spawn(value_of(i)).fork();
        auto later = value_of(3 * i);  // a frame above a's, alive past both joins
        auto b = weft::spawn(value_of(2 * i)).fork();
        const int x = co_await a;  // not the top: b and later lie above it
        std::array<int, 100> ones;
        ones.fill(1);
        // A frame made now would cover `later` and b if a's had been popped.
        const int w = co_await weft::spawn(sum_of(ones));
        const int y = co_await b;                             // the top, but the frame below it is `later`'s
        const int z = co_await weft::spawn(value_of(5 * i));  // the top: popped
        total += x + y + z + w + co_await std::move(later);
      }
      co_return total;
    }());
    CHECK(r == 11L * (1999L * 2000L / 2) + 100L * 2000L);
  }
  SECTION("parameters with a destructor are destroyed") {
    std::atomic<int> live{0};
    auto sum = weft::sync_wait(pool, [](std::atomic<int>& n) -> weft::task<int> {
      int total = 0;
      for (int i = 0; i < 100; ++i) {
        auto h = weft::spawn(value_held(i, tracker{n})).fork();
        total += co_await weft::spawn(value_held(1, tracker{n}));
        total += co_await h;
      }
      co_return total;
    }(live));
    CHECK(sum == 100 + 99 * 100 / 2);
    CHECK(live == 0);
  }
  SECTION("results with a destructor") {
    auto n = weft::sync_wait(pool, []() -> weft::task<std::size_t> {
      std::size_t total = 0;
      for (std::size_t i = 0; i < 100; ++i) {
        auto h = weft::spawn(text_of(40 + i)).fork();
        const std::string inline_text = co_await weft::spawn(text_of(20));  // g++-12 rejects (co_await x).size()
        const std::string forked_text = co_await h;
        total += inline_text.size() + forked_text.size();
      }
      co_return total;
    }());
    CHECK(n == 100 * 20 + 100 * 40 + 99 * 100 / 2);
  }
  SECTION("a join that throws frees the frame and its exception") {
    std::atomic<int> live{0};
    auto caught = weft::sync_wait(pool, [](std::atomic<int>& n) -> weft::task<int> {
      int count = 0;
      for (int i = 0; i < 100; ++i) {
        auto h = weft::spawn(throws_tracked(n)).fork();
        try {
          (void)co_await h;
        } catch (const tracked_error&) {
          ++count;
        }
        try {
          (void)co_await weft::spawn(throws_tracked(n));
        } catch (const tracked_error&) {
          ++count;
        }
      }
      co_return count + co_await weft::spawn(value_of(1));
    }(live));
    CHECK(caught == 201);
    CHECK(live == 0);  // no exception left behind in a frame
  }
}

TEMPLATE_LIST_TEST_CASE("fork_handle: state and misuse", "[spawn]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("an empty handle") {
    weft::fork_handle<int> h;
    CHECK_FALSE(h.valid());
    CHECK_FALSE(static_cast<bool>(h));
    CHECK_FALSE(h.ready());
    auto threw = weft::sync_wait(pool, [](weft::fork_handle<int>& handle) -> weft::task<bool> {
      try {
        co_await handle;
      } catch (const std::logic_error&) {
        co_return true;
      }
      co_return false;
    }(h));
    CHECK(threw);
  }
  SECTION("awaited once, then empty; a second await throws std::logic_error") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto h = weft::spawn(value_of(5)).fork();
      const bool valid_before = h.valid();
      const int v = co_await h;
      const bool valid_after = h.valid();
      bool threw = false;
      try {
        co_await h;
      } catch (const std::logic_error&) {
        threw = true;
      }
      co_return valid_before&& v == 5 && !valid_after && threw;
    }());
    CHECK(r);
  }
  SECTION("a moved handle transfers the child") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto h = weft::spawn(value_of(6)).fork();
      weft::fork_handle<int> g = std::move(h);
      const bool moved = !h.valid() && g.valid();
      co_return moved&& co_await g == 6;
    }());
    CHECK(r);
  }
  SECTION("not ready before it could run") {
    if constexpr (TestType::k_threads == 1) {
      auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
        auto h = weft::spawn(value_of(7)).fork();
        const bool ready_early = h.ready();  // the only worker is running us
        co_return !ready_early && co_await h == 7;
      }());
      CHECK(r);
    }
  }
  SECTION("forking an empty task throws std::logic_error") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      bool threw = false;
      try {
        auto h = weft::spawn(weft::task<int>{}).fork();
      } catch (const std::logic_error&) {
        threw = true;
      }
      co_return threw;
    }());
    CHECK(r);
  }
}

TEMPLATE_LIST_TEST_CASE("spawn: an exception in a child is rethrown at its join", "[spawn]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("fork") {
    auto what = weft::sync_wait(pool, []() -> weft::task<std::string> {
      auto h = weft::spawn(throws_runtime("child failed")).fork();
      auto ok = weft::spawn(value_of(1)).fork();
      (void)co_await ok;
      try {
        (void)co_await h;
      } catch (const std::runtime_error& e) {
        co_return e.what();
      }
      co_return "no exception";
    }());
    CHECK(what == "child failed");
  }
  SECTION("co_await spawn") {
    CHECK_THROWS_WITH(
        weft::sync_wait(pool,
                        []() -> weft::task<int> { co_return co_await weft::spawn(throws_runtime("inline failed")); }()),
        "inline failed");
  }
  SECTION("co_await spawn with a priority") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      []() -> weft::task<int> {
                                        co_return co_await weft::spawn(throws_runtime("queued failed")).priority(1);
                                      }()),
                      "queued failed");
  }
}

TEMPLATE_LIST_TEST_CASE("spawn: detached children still run and free their frames", "[spawn]",
                        weft_test::executor_kinds) {
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  {
    WEFT_TEST_EXECUTOR(pool);
    weft::sync_wait(pool, [](std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<void> {
      weft::spawn(holds(tracker{alive}, runs)).detach();         // spawn(...).detach()
      auto h = weft::spawn(holds(tracker{alive}, runs)).fork();  // fork_handle::detach()
      h.detach();
      {
        auto dropped = weft::spawn(holds(tracker{alive}, runs)).fork();
      }  // handle destroyed unawaited
      weft::spawn(throws_void()).detach();  // reported on stderr, no terminate
      co_return;
    }(live, ran));
  }  // the pool runs everything queued before it goes
  CHECK(ran == 3);
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("spawn: priority(p) queues the child at p; the parent keeps its own", "[spawn]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  REQUIRE(pool.priorities() == 4);
  auto r = weft::sync_wait(
      pool,
      []() -> weft::task<bool> {
        auto h = weft::spawn(priority()).priority(3).fork();
        const unsigned forked = co_await h;
        const unsigned mine_after_fork = weft::current_priority();
        const unsigned awaited = co_await weft::spawn(priority()).priority(0);
        const unsigned mine_after_await = weft::current_priority();
        const unsigned inherited = co_await weft::spawn(priority()).fork();
        co_return forked == 3 && awaited == 0 && inherited == 1 && mine_after_fork == 1 && mine_after_await == 1;
      }(),
      1);
  CHECK(r);
}

TEMPLATE_LIST_TEST_CASE("spawn: a priority out of range throws std::out_of_range and leaks nothing", "[spawn]",
                        weft_test::executor_kinds) {
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  {
    WEFT_TEST_EXECUTOR(pool);
    auto r = weft::sync_wait(pool, [](std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<int> {
      int thrown = 0;
      try {
        auto h = weft::spawn(holds(tracker{alive}, runs)).priority(4).fork();
      } catch (const std::out_of_range&) {
        ++thrown;
      }
      try {
        weft::spawn(holds(tracker{alive}, runs)).priority(99).detach();
      } catch (const std::out_of_range&) {
        ++thrown;
      }
      try {
        co_await weft::spawn(holds(tracker{alive}, runs)).priority(4);
      } catch (const std::out_of_range&) {
        ++thrown;
      }
      co_return thrown;
    }(live, ran));
    CHECK(r == 3);
  }
  CHECK(ran == 0);
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("spawn: run_on(ex) runs the child on ex; the parent resumes at home", "[spawn]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool other{{.threads = 2}};
  auto r = weft::sync_wait(pool, [](weft::executor& home, weft::executor& there) -> weft::task<bool> {
    auto h = weft::spawn(on(there)).run_on(there).fork();
    const bool child_forked_there = co_await h;
    const bool home_after_fork = home.owns_current_thread();
    const bool child_awaited_there = co_await weft::spawn(on(there)).run_on(there);
    const bool home_after_await = home.owns_current_thread();
    const int v = co_await weft::spawn(value_of(3)).run_on(home);  // run_on the own executor
    co_return child_forked_there&& home_after_fork&& child_awaited_there&& home_after_await&& v == 3;
  }(pool, other));
  CHECK(r);
}

TEMPLATE_LIST_TEST_CASE("spawn: fib(30) with a fork per call", "[spawn][depth]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, fib(30)) == 832040);
}

TEMPLATE_LIST_TEST_CASE("spawn: a 100,000-deep recursive fork chain does not overflow the stack", "[spawn][depth]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, fork_chain(100'000)) == 100'000);
  CHECK(weft::sync_wait(pool, spawn_chain(100'000)) == 100'000);
}
