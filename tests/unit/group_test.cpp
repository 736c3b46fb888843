// weft/group.hpp: every group operation, more members than workers (fibers),
// exceptions, nested dispatch, empty claim spaces, concurrent groups at several
// priorities, dispatch from fork-join tasks, misuse.
#include <weft/group.hpp>

#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn_many.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

/// Runs `body` (a coroutine lambda-free task) on `pool` and waits.
template <class T>
T run_on(weft::thread_pool& pool, weft::task<T> t) {
  return weft::sync_wait(pool, std::move(t));
}

/// Every index of [0, n) claimed exactly once, summed with reduce.
weft::task<std::uint64_t> claim_sum(weft::executor& ex, std::size_t members, std::size_t n, std::size_t chunk,
                                    std::vector<std::atomic<int>>& seen) {
  std::uint64_t result = 0;
  std::atomic<int> agreeing{0};
  co_await weft::dispatch(ex, {.members = members, .range = n}, [&](weft::group& g) {
    std::uint64_t partial = 0;
    for (auto r = g.claim(chunk); r; r = g.claim(chunk)) {
      for (std::size_t i : r) {
        seen[i].fetch_add(1, std::memory_order_relaxed);
        partial += i;
      }
    }
    const std::uint64_t total = g.reduce(partial, std::plus<>{});
    if (g.index() == 0) result = total;
    if (total == n * (n - 1) / 2) agreeing.fetch_add(1, std::memory_order_relaxed);
  });
  REQUIRE(agreeing.load() == static_cast<int>(members == 0 ? 0 : members));
  co_return result;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("group: claim covers the space once and reduce sums it", "[group]", weft_test::all_executors) {
  auto pool = TestType::make();
  for (std::size_t members : {std::size_t{1}, TestType::k_threads, std::size_t{3}, std::size_t{9}}) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{5000}}) {
      constexpr std::size_t n = 2000;
      std::vector<std::atomic<int>> seen(n);
      const auto sum = run_on(pool, claim_sum(pool, members, n, chunk, seen));
      CHECK(sum == n * (n - 1) / 2);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(seen[i].load() == 1);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("group: index and size; members = 0 is one per worker", "[group]", weft_test::all_executors) {
  auto pool = TestType::make();
  for (std::size_t members : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{64}}) {
    const std::size_t expected = members == 0 ? TestType::k_threads : members;
    std::vector<std::atomic<int>> ran(expected);
    std::atomic<int> wrong_size{0};
    run_on(pool, [&]() -> weft::task<void> {
      co_await weft::dispatch(pool, {.members = members}, [&](weft::group& g) {
        if (g.size() != expected) wrong_size.fetch_add(1);
        ran[g.index()].fetch_add(1);
      });
    }());
    CHECK(wrong_size.load() == 0);
    for (auto& r : ran) REQUIRE(r.load() == 1);
  }
}

TEMPLATE_LIST_TEST_CASE("group: barrier separates phases, also with more members than workers", "[group][fiber]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  for (std::size_t members : {TestType::k_threads, TestType::k_threads + 1, std::size_t{17}}) {
    constexpr int k_phases = 40;
    std::vector<std::atomic<int>> slot(members);
    std::atomic<int> violations{0};
    run_on(pool, [&]() -> weft::task<void> {
      co_await weft::dispatch(pool, {.members = members}, [&](weft::group& g) {
        for (int phase = 1; phase <= k_phases; ++phase) {
          slot[g.index()].store(phase, std::memory_order_relaxed);
          g.barrier();
          for (auto& s : slot)
            if (s.load(std::memory_order_relaxed) != phase) violations.fetch_add(1);
          g.barrier();
        }
      });
    }());
    CHECK(violations.load() == 0);
    for (auto& s : slot) CHECK(s.load() == k_phases);
  }
}

TEMPLATE_LIST_TEST_CASE("group: reduce combines in index order; broadcast from any root", "[group]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  for (std::size_t members : {std::size_t{1}, std::size_t{4}, std::size_t{11}}) {
    std::string expected;
    for (std::size_t i = 0; i < members; ++i) expected += std::to_string(i) + ",";
    std::atomic<int> good{0};
    run_on(pool, [&]() -> weft::task<void> {
      co_await weft::dispatch(pool, {.members = members}, [&](weft::group& g) {
        const std::string joined =
            g.reduce(std::to_string(g.index()) + ",", [](std::string a, const std::string& b) { return a + b; });
        const auto max = g.reduce(g.index() * 3, [](std::size_t a, std::size_t b) { return std::max(a, b); });
        const auto from0 = g.broadcast(std::string("member ") + std::to_string(g.index()));
        const std::size_t root = g.size() - 1;
        const auto fromlast = g.broadcast(g.index() * 10, root);
        if (joined == expected && max == (members - 1) * 3 && from0 == "member 0" && fromlast == root * 10)
          good.fetch_add(1);
      });
    }());
    CHECK(good.load() == static_cast<int>(members));
  }
}

TEMPLATE_LIST_TEST_CASE("group: members that returned are left out of barriers and reduce", "[group][fiber]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  std::atomic<int> good{0};
  std::atomic<int> root_gone{0};
  run_on(pool, [&]() -> weft::task<void> {
    co_await weft::dispatch(pool, {.members = 7}, [&](weft::group& g) {
      if (g.index() % 2 == 1) return;  // odd members leave at once
      g.barrier();
      const auto sum = g.reduce(g.index(), std::plus<>{});  // 0 + 2 + 4 + 6
      const auto again = g.reduce(std::size_t{1}, std::plus<>{});
      if (sum == 12 && again == 4) good.fetch_add(1);
      try {
        (void)g.broadcast(5, 1);
      } catch (const std::logic_error&) {
        root_gone.fetch_add(1);
      }
    });
  }());
  CHECK(good.load() == 4);
  CHECK(root_gone.load() == 4);
}

TEMPLATE_LIST_TEST_CASE("group: shared object built once, destroyed after the last member", "[group]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  struct counter {
    explicit counter(std::atomic<int>& live, int start) : m_tracker(live), value(start) {}
    weft_test::tracker m_tracker;
    std::atomic<int> value;
  };
  std::atomic<int> live{0};
  std::atomic<int> live_during{0};
  std::set<const void*> addresses;
  std::mutex mutex;
  int final_value = 0;
  run_on(pool, [&]() -> weft::task<void> {
    co_await weft::dispatch(pool, {.members = 6}, [&](weft::group& g) {
      auto& c = g.shared<counter>(live, 100);  // only the first call's arguments count
      auto& v = g.shared<std::vector<int>>(6, 0);
      c.value.fetch_add(1);
      v[g.index()] = 1;
      {
        std::lock_guard lock(mutex);
        addresses.insert(&c);
      }
      g.barrier();
      live_during.store(live.load());
      if (g.index() == 0) final_value = c.value.load() + v[0] + v[1] + v[2] + v[3] + v[4] + v[5];
    });
  }());
  CHECK(addresses.size() == 1);
  CHECK(live_during.load() == 1);
  CHECK(live.load() == 0);
  CHECK(final_value == 112);
}

TEMPLATE_LIST_TEST_CASE("group: empty claim spaces and next_phase re-arms", "[group]", weft_test::all_executors) {
  auto pool = TestType::make();
  std::atomic<int> empty_claims{0};
  std::vector<std::atomic<int>> seen(300);
  run_on(pool, [&]() -> weft::task<void> {
    co_await weft::dispatch(pool, {.members = 5}, [&](weft::group& g) {  // range 0
      if (!g.claim(4) && g.claim(1).empty()) empty_claims.fetch_add(1);
      g.next_phase(100);
      for (auto r = g.claim(3); r; r = g.claim(3))
        for (auto i : r) seen[i].fetch_add(1);
      g.next_phase(300);
      for (auto r = g.claim(8); r; r = g.claim(8))
        for (auto i : r) seen[i].fetch_add(1);
      g.next_phase(0);
      if (g.claim(1).empty()) empty_claims.fetch_add(1);
    });
  }());
  CHECK(empty_claims.load() == 10);
  for (std::size_t i = 0; i < 300; ++i) REQUIRE(seen[i].load() == (i < 100 ? 2 : 1));
}

TEMPLATE_LIST_TEST_CASE("group: the first exception is rethrown, the others stop", "[group][fiber]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  for (std::size_t members : {std::size_t{2}, std::size_t{3}, std::size_t{12}}) {
    std::atomic<int> live{0};
    std::atomic<int> finished{0};
    auto run = [&]() -> weft::task<void> {
      co_await weft::dispatch(pool, {.members = members, .range = 1'000'000'000}, [&](weft::group& g) {
        g.shared<weft_test::tracker>(live);
        if (g.index() == 1) {
          g.barrier();
          throw std::runtime_error("member 1 failed");
        }
        for (;;) {  // would never end without the cancellation
          (void)g.claim(1);
          g.barrier();
        }
        finished.fetch_add(1);
      });
    };
    REQUIRE_THROWS_WITH(run_on(pool, run()), "member 1 failed");
    CHECK(finished.load() == 0);
    CHECK(live.load() == 0);
  }
  // A failure inside reduce's combining function, and in a kernel without barriers.
  REQUIRE_THROWS_WITH(run_on(pool,
                             [&]() -> weft::task<void> {
                               co_await weft::dispatch(pool, {.members = 5}, [](weft::group& g) {
                                 (void)g.reduce(int(g.index()), [](int a, int b) -> int {
                                   if (b == 3) throw std::logic_error("bad op");
                                   return a + b;
                                 });
                               });
                             }()),
                      "bad op");
  REQUIRE_THROWS_AS(run_on(pool,
                           [&]() -> weft::task<void> {
                             co_await weft::dispatch(pool, {.members = 3, .range = 10}, [](weft::group& g) {
                               if (g.index() == 2) (void)g.claim(0);
                             });
                           }()),
                    std::invalid_argument);
}

TEMPLATE_LIST_TEST_CASE("group: nested dispatch runs inline on the member", "[group][fiber]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  std::atomic<int> good{0};
  std::atomic<int> wrong_thread{0};
  run_on(pool, [&]() -> weft::task<void> {
    co_await weft::dispatch(pool, {.members = 3}, [&](weft::group& outer) {
      const auto me = std::this_thread::get_id();
      std::uint64_t inner_total = 0;
      weft::dispatch_inline({.members = 4, .range = 100}, [&](weft::group& inner) {
        if (std::this_thread::get_id() != me) wrong_thread.fetch_add(1);
        std::uint64_t part = 0;
        for (auto r = inner.claim(3); r; r = inner.claim(3))
          for (auto i : r) part += i;
        inner.barrier();
        const auto total = inner.reduce(part, std::plus<>{});
        if (inner.index() == 0) inner_total = total;
      });
      outer.barrier();
      const auto sum = outer.reduce(inner_total, std::plus<>{});
      if (sum == 3 * 4950) good.fetch_add(1);
    });
  }());
  CHECK(good.load() == 3);
  CHECK(wrong_thread.load() == 0);

  // Calling the outer group's barrier from an inner member is a clear error.
  REQUIRE_THROWS_AS(run_on(pool,
                           [&]() -> weft::task<void> {
                             co_await weft::dispatch(pool, {.members = 2}, [](weft::group& outer) {
                               weft::dispatch_inline({.members = 2}, [&](weft::group&) { outer.barrier(); });
                             });
                           }()),
                    std::logic_error);
}

namespace {

weft::task<std::uint64_t> group_sum(weft::executor& ex, unsigned prio, std::size_t members, std::size_t n) {
  std::uint64_t out = 0;
  co_await weft::dispatch(ex, {.members = members, .priority = prio, .range = n}, [&](weft::group& g) {
    std::uint64_t part = 0;
    for (auto r = g.claim(16); r; r = g.claim(16))
      for (auto i : r) part += i;
    g.barrier();
    const auto total = g.reduce(part, std::plus<>{});
    if (g.index() == 0) out = total;
  });
  co_return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("group: many groups in flight from fork-join tasks, at several priorities", "[group]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  constexpr int k_groups = 24;
  auto root = [&]() -> weft::task<std::vector<std::uint64_t>> {
    std::vector<weft::task<std::uint64_t>> ts;
    for (int i = 0; i < k_groups; ++i) ts.push_back(group_sum(pool, static_cast<unsigned>(i % 4), 1 + i % 6, 1000 + i));
    co_return co_await weft::spawn_many(std::move(ts));
  };
  const auto sums = run_on(pool, root());
  REQUIRE(sums.size() == k_groups);
  for (int i = 0; i < k_groups; ++i) {
    const std::uint64_t n = 1000 + i;
    CHECK(sums[i] == n * (n - 1) / 2);
  }
}

TEST_CASE("group: a barrier never waits for a member queued behind a busy worker", "[group][fiber]") {
  weft_test::gate started, release;  // outlive the pool, whose worker waits on them
  weft::thread_pool pool{{.threads = 2}};
  weft::post(pool, weft_test::hold_worker(started, release));
  started.wait();  // one worker is held until the group is done
  std::atomic<int> violations{0};
  std::vector<std::atomic<int>> slot(2);
  weft::sync_wait(pool, [&]() -> weft::task<void> {
    co_await weft::dispatch(pool, {.members = 2}, [&](weft::group& g) {
      for (int phase = 1; phase <= 20; ++phase) {
        slot[g.index()].store(phase);
        g.barrier();
        if (slot[0].load() != phase || slot[1].load() != phase) violations.fetch_add(1);
        g.barrier();
      }
    });
  }());
  release.open();
  CHECK(violations.load() == 0);
}

TEST_CASE("group: dispatch to another executor resumes on the dispatcher's own", "[group]") {
  weft::thread_pool home{{.threads = 1}};
  weft::thread_pool other{{.threads = 2}};
  std::atomic<int> on_other{0};
  const bool back_home = weft::sync_wait(home, [&]() -> weft::task<bool> {
    co_await weft::dispatch(other, {.members = 3, .range = 30}, [&](weft::group& g) {
      if (other.owns_current_thread()) on_other.fetch_add(1);
      for (auto r = g.claim(2); r; r = g.claim(2)) {
      }
      g.barrier();
    });
    co_return home.owns_current_thread();
  }());
  CHECK(back_home);
  CHECK(on_other.load() == 3);
}

TEST_CASE("group: dispatch_inline on a plain thread; bad arguments", "[group]") {
  std::uint64_t total = 0;
  weft::dispatch_inline({.members = 5, .range = 1000}, [&](weft::group& g) {
    std::uint64_t part = 0;
    for (auto r = g.claim(10); r; r = g.claim(10))
      for (auto i : r) part += i;
    const auto t = g.reduce(part, std::plus<>{});
    if (g.index() == 4) total = t;
  });
  CHECK(total == 499500);

  weft::thread_pool pool{{.threads = 2, .priorities = 2}};
  auto noop = [](weft::group&) {};
  CHECK_THROWS_AS(weft::dispatch(pool, {.members = std::size_t{1} << 30}, noop), std::invalid_argument);
  CHECK_THROWS_AS(weft::dispatch(pool, {.priority = 2}, noop), std::out_of_range);
  CHECK_THROWS_AS(weft::dispatch_inline({.members = 2}, [](weft::group& g) { (void)g.broadcast(1, 2); }),
                  std::out_of_range);
  // The kernel must be a plain member function of the group (compile-time checks are
  // static_asserts in weft/group.hpp).
}
