// weft/fork_group.hpp: results in fork order, size, reuse, exceptions, detaching on
// destruction, misuse.
#include <weft/fork_group.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <weft/resume_on.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

using weft_test::tracker;

weft::task<int> square(int i) { co_return i* i; }
weft::task<void> holds(tracker, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  co_return;
}
weft::task<int> maybe_throws(int i, bool fail, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  if (fail) throw std::runtime_error("child " + std::to_string(i));
  co_return i;
}

// A tree: each node forks `fanout` children in a group until depth 0; counts leaves.
weft::task<std::uint64_t> tree(int depth, int fanout) {
  if (depth == 0) co_return 1;
  weft::fork_group<std::uint64_t> g;
  for (int i = 0; i < fanout; ++i) g.fork(tree(depth - 1, fanout));
  std::uint64_t n = 0;
  for (auto v : co_await g.join()) n += v;
  co_return n;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("fork_group: join gives the results in fork order", "[fork_group]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("values, size, reuse") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::fork_group<int> g;
      const bool empty_at_start = g.size() == 0;
      for (int i = 0; i < 100; ++i) g.fork(square(i));
      const bool counted = g.size() == 100;
      auto v = co_await g.join();
      bool in_order = v.size() == 100;
      for (int i = 0; i < 100 && in_order; ++i) in_order = v[i] == i * i;
      const bool empty_after = g.size() == 0;
      g.fork(square(12));  // reusable
      auto w = co_await g.join();
      co_return empty_at_start&& counted&& in_order&& empty_after&& w == std::vector<int>{144};
    }());
    CHECK(r);
  }
  SECTION("joining an empty group gives an empty vector") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::fork_group<int> g;
      auto v = co_await g.join();
      co_return v.empty();
    }());
    CHECK(r);
  }
  SECTION("void group") {
    std::atomic<int> live{0};
    std::atomic<int> ran{0};
    weft::sync_wait(pool, [](std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<void> {
      weft::fork_group<> g;
      for (int i = 0; i < 50; ++i) g.fork(holds(tracker{alive}, runs));
      co_await g.join();
    }(live, ran));
    CHECK(ran == 50);
    CHECK(live == 0);
  }
  SECTION("a tree of groups: 8^5 leaves") { CHECK(weft::sync_wait(pool, tree(5, 8)) == 32768); }
  SECTION("20,000 forks in one group") {
    auto sum = weft::sync_wait(pool, []() -> weft::task<long> {
      weft::fork_group<int> g;
      for (int i = 0; i < 20'000; ++i) g.fork(square(i % 100));
      long s = 0;
      for (int v : co_await g.join()) s += v;
      co_return s;
    }());
    CHECK(sum == 200L * 328'350);
  }
}

TEMPLATE_LIST_TEST_CASE("fork_group: fork(fn, args...) forks what fn returns", "[fork_group]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    weft::fork_group<int> g;
    for (int i = 0; i < 20; ++i) g.fork(square, i);
    g.fork([] { return square(20); });
    bool fn_threw = false;
    try {
      g.fork([]() -> weft::task<int> { throw std::runtime_error("fn failed"); });
    } catch (const std::runtime_error&) {
      fn_threw = true;  // nothing was forked
    }
    const std::size_t forked = g.size();
    const auto v = co_await g.join();
    bool ok = forked == 21 && v.size() == 21 && fn_threw;
    for (int i = 0; i <= 20 && ok; ++i) ok = v[i] == i * i;
    co_return ok;
  }());
  CHECK(r);
}

TEMPLATE_LIST_TEST_CASE("fork_group: the lowest-index exception is rethrown after every child finished", "[fork_group]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(weft::sync_wait(pool,
                                    [](std::atomic<int>& runs) -> weft::task<int> {
                                      weft::fork_group<int> g;
                                      for (int i = 0; i < 40; ++i) g.fork(maybe_throws(i, i % 10 == 9, runs));
                                      auto v = co_await g.join();
                                      co_return static_cast<int>(v.size());
                                    }(ran)),
                    "child 9");
  CHECK(ran == 40);
}

TEMPLATE_LIST_TEST_CASE("fork_group: a group destroyed before join detaches its children", "[fork_group]",
                        weft_test::executor_kinds) {
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  {
    WEFT_TEST_EXECUTOR(pool);
    weft::sync_wait(pool, [](std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<void> {
      weft::fork_group<> g;
      for (int i = 0; i < 100; ++i) g.fork(holds(tracker{alive}, runs));
      co_return;
    }(live, ran));
  }
  CHECK(ran == 100);
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("fork_group: forking an empty task throws std::logic_error", "[fork_group]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    weft::fork_group<int> g;
    g.fork(square(2));
    bool threw = false;
    try {
      g.fork(weft::task<int>{});
    } catch (const std::logic_error&) {
      threw = true;
    }
    auto v = co_await g.join();
    co_return threw&& v == std::vector<int>{4};
  }());
  CHECK(r);
}

TEMPLATE_LIST_TEST_CASE("fork_group<void>: a child's frame is freed as soon as it finishes, before the join",
                        "[fork_group]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool elsewhere{{.threads = 1}};  // where the parent waits, off the children's workers
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  auto r = weft::sync_wait(
      pool, [](weft::executor& away, std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<bool> {
        weft::fork_group<> g;
        for (int i = 0; i < 100; ++i) g.fork(holds(tracker{alive}, runs));
        co_await weft::resume_on(away);  // the children run on the pool meanwhile
        // Bounded wait: every child ran and its frame (with its tracker) is gone, not joined yet.
        const auto until = std::chrono::steady_clock::now() + 10s;
        while ((runs.load() < 100 || alive.load() != 0) && std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
        const bool freed = runs.load() == 100 && alive.load() == 0 && g.size() == 0;
        co_await g.join();  // from another executor than the children's: resumes there
        co_return freed;
      }(elsewhere, live, ran));
  CHECK(r);
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("fork_group<void>: memory is bounded by the children alive, not by those ever forked",
                        "[fork_group]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool elsewhere{{.threads = 1}};
  std::atomic<int> live{0};
  std::atomic<int> ran{0};
  constexpr int k_batches = 200;
  constexpr int k_batch = 1000;
  // 200,000 children in one group, never joined in between: after each batch has run,
  // nothing of it is left (as a server's accept loop forks connection after connection).
  auto batches_freed = weft::sync_wait(
      pool,
      [](weft::executor& ex, weft::executor& away, std::atomic<int>& alive, std::atomic<int>& runs) -> weft::task<int> {
        weft::fork_group<> g;
        int freed = 0;
        for (int b = 0; b < k_batches; ++b) {
          for (int i = 0; i < k_batch; ++i) g.fork(holds(tracker{alive}, runs));
          co_await weft::resume_on(away);  // the pool runs the batch meanwhile
          const int want = (b + 1) * k_batch;
          const auto until = std::chrono::steady_clock::now() + 5s;
          while ((runs.load() < want || alive.load() != 0) && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
          co_await weft::resume_on(ex);
          if (runs.load() != want || alive.load() != 0) break;
          ++freed;
        }
        co_await g.join();
        co_return freed;
      }(pool, elsewhere, live, ran));
  CHECK(batches_freed == k_batches);
  CHECK(ran == k_batches * k_batch);
  CHECK(live == 0);
}

TEMPLATE_LIST_TEST_CASE("fork_group<void>: the lowest-index exception, counted from the last join", "[fork_group]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};
  auto first = [](std::atomic<int>& runs) -> weft::task<std::string> {
    weft::fork_group<> g;
    for (int i = 0; i < 5; ++i)
      g.fork(weft::task<void>([](std::atomic<int>& r) -> weft::task<void> {
        r.fetch_add(1);
        co_return;
      }(runs)));
    co_await g.join();  // no exception: the next round's indices start again at 0
    for (int i = 0; i < 40; ++i)
      g.fork([](int k, std::atomic<int>& r) -> weft::task<void> {
        co_await maybe_throws(k, k % 10 == 9 || k == 35, r);
      }(i, runs));
    std::string what;
    try {
      co_await g.join();
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    co_return what;
  };
  CHECK(weft::sync_wait(pool, first(ran)) == "child 9");
  CHECK(ran == 45);
}
