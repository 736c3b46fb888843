// weft/spawn_many.hpp: every overload, result order, exceptions after all children,
// misuse, wide and nested fan-outs.
#include <weft/spawn_many.hpp>

#include <weft/pool.hpp>
#include <weft/resume_on.hpp>
#include <weft/spawn.hpp>
#include <weft/spawn_tuple.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

weft::task<int> square(int i) { co_return i* i; }

std::vector<weft::task<int>> squares(int n) {
  std::vector<weft::task<int>> ts;
  for (int i = 0; i < n; ++i) ts.push_back(square(i));
  return ts;
}

std::vector<int> expected_squares(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i * i);
  return v;
}

weft::task<void> increment(std::atomic<int>& n) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

// Child i throws "child i" when i is in a failing position; every child counts itself.
weft::task<int> maybe_throws(int i, bool fail, std::atomic<int>& ran) {
  ran.fetch_add(1, std::memory_order_relaxed);
  if (fail) throw std::runtime_error("child " + std::to_string(i));
  co_return i;
}

// Sum of [lo, hi) by recursive halving with spawn_many of two.
weft::task<std::uint64_t> range_sum(std::uint64_t lo, std::uint64_t hi) {
  if (hi - lo <= 4) {
    std::uint64_t s = 0;
    for (auto i = lo; i < hi; ++i) s += i;
    co_return s;
  }
  const auto mid = lo + (hi - lo) / 2;
  std::vector<weft::task<std::uint64_t>> halves;
  halves.push_back(range_sum(lo, mid));
  halves.push_back(range_sum(mid, hi));
  auto r = co_await weft::spawn_many(std::move(halves));
  co_return r[0] + r[1];
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("spawn_many: results in input order, for every overload", "[spawn_many]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("rvalue vector") {
    auto r = weft::sync_wait(
        pool, []() -> weft::task<std::vector<int>> { co_return co_await weft::spawn_many(squares(100)); }());
    CHECK(r == expected_squares(100));
  }
  SECTION("lvalue vector: the tasks are moved out") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto ts = squares(50);
      auto v = co_await weft::spawn_many(ts);
      bool moved = ts.size() == 50;
      for (auto& t : ts) moved = moved && !t.valid();
      co_return moved&& v == expected_squares(50);
    }());
    CHECK(r);
  }
  SECTION("a std::list") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::vector<int>> {
      std::list<weft::task<int>> ts;
      for (int i = 0; i < 30; ++i) ts.push_back(square(i));
      co_return co_await weft::spawn_many(ts);
    }());
    CHECK(r == expected_squares(30));
  }
  SECTION("iterator pair") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::vector<int>> {
      auto ts = squares(40);
      co_return co_await weft::spawn_many(ts.begin() + 10, ts.end());
    }());
    auto all = expected_squares(40);
    CHECK(r == std::vector<int>(all.begin() + 10, all.end()));
  }
  SECTION("iterator and count") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto ts = squares(40);
      auto v = co_await weft::spawn_many(ts.begin() + 5, std::size_t{20});
      const auto all = expected_squares(25);
      co_return ts[4].valid() && !ts[5].valid() && !ts[24].valid() && ts[25].valid() &&
          v == std::vector<int>(all.begin() + 5, all.end());
    }());
    CHECK(r);
  }
  SECTION("std::array of tasks gives a std::array") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::array<int, 4>> {
      // The array is a named local: g++-12 destroys a braced temporary in a co_await
      // operand twice (a compiler bug; clang is fine).
      std::array<weft::task<int>, 4> ts{square(1), square(2), square(3), square(4)};
      co_return co_await weft::spawn_many(std::move(ts));
    }());
    CHECK(r == std::array<int, 4>{1, 4, 9, 16});
  }
  SECTION("spawn_many<N>(first) gives a std::array") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::array<int, 3>> {
      auto ts = squares(5);
      co_return co_await weft::spawn_many<3>(ts.begin() + 2);
    }());
    CHECK(r == std::array<int, 3>{4, 9, 16});
  }
  SECTION("spawn_many<N>(gen) gives a std::array, gen called in index order") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      std::vector<std::size_t> calls;
      auto v = co_await weft::spawn_many<5>([&calls](std::size_t i) {
        calls.push_back(i);
        return square(static_cast<int>(i));
      });
      co_return v == std::array<int, 5>{0, 1, 4, 9, 16} && calls == std::vector<std::size_t>{0, 1, 2, 3, 4};
    }());
    CHECK(r);
  }
  SECTION("spawn_many(n, gen) gives a std::vector") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::vector<int>> {
      co_return co_await weft::spawn_many(std::size_t{60}, [](std::size_t i) { return square(static_cast<int>(i)); });
    }());
    CHECK(r == expected_squares(60));
  }
  SECTION("spawn_many(0, gen) gives an empty vector and never calls gen") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      bool called = false;
      auto v = co_await weft::spawn_many(std::size_t{0}, [&called](std::size_t) {
        called = true;
        return square(1);
      });
      co_return v.empty() && !called;
    }());
    CHECK(r);
  }
  SECTION("a single task") {
    auto r = weft::sync_wait(
        pool, []() -> weft::task<std::vector<int>> { co_return co_await weft::spawn_many(squares(1)); }());
    CHECK(r == std::vector<int>{0});
  }
  SECTION("an empty range gives an empty vector") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::vector<int>> {
      co_return co_await weft::spawn_many(std::vector<weft::task<int>>{});
    }());
    CHECK(r.empty());
  }
  SECTION("move-only results") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::size_t> {
      std::vector<weft::task<std::unique_ptr<int>>> ts;
      for (int i = 0; i < 10; ++i)
        ts.push_back([](int k) -> weft::task<std::unique_ptr<int>> { co_return std::make_unique<int>(k); }(i));
      auto v = co_await weft::spawn_many(std::move(ts));
      std::size_t ok = 0;
      for (int i = 0; i < 10; ++i) ok += (v[i] && *v[i] == i) ? 1 : 0;
      co_return ok;
    }());
    CHECK(r == 10);
  }
}

namespace {

// 0..4 children for node `id`, pseudo-random.
std::size_t fan_out(std::uint32_t id) { return ((id * 2654435761u) >> 28) % 5; }

// Counts the nodes of a tree whose node `id` has fan_out(id) children, down to `depth`,
// with the bounded generator form; `seen` counts the nodes that ran.
weft::task<long> bounded_tree(std::uint32_t id, int depth, std::atomic<long>& seen) {
  seen.fetch_add(1, std::memory_order_relaxed);
  if (depth == 0) co_return 1;
  const std::size_t k = fan_out(id);
  long nodes = 1;
  for (long c : co_await weft::spawn_many<4>(
           k, [&](std::size_t i) { return bounded_tree(id * 7 + static_cast<std::uint32_t>(i) + 1, depth - 1, seen); }))
    nodes += c;
  co_return nodes;
}

long bounded_tree_seq(std::uint32_t id, int depth) {
  if (depth == 0) return 1;
  long nodes = 1;
  for (std::uint32_t i = 0; i < fan_out(id); ++i) nodes += bounded_tree_seq(id * 7 + i + 1, depth - 1);
  return nodes;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("spawn_many<N>(n, gen): up to N children, no heap", "[spawn_many]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};

  SECTION("results in index order in a bounded_vector, gen called in index order") {
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{8}}) {
      auto r = weft::sync_wait(pool, [](std::size_t count) -> weft::task<bool> {
        std::vector<std::size_t> calls;
        weft::bounded_vector<int, 8> v = co_await weft::spawn_many<8>(count, [&calls](std::size_t i) {
          calls.push_back(i);
          return square(static_cast<int>(i));
        });
        const auto want = expected_squares(static_cast<int>(count));
        std::vector<std::size_t> want_calls(count);
        std::iota(want_calls.begin(), want_calls.end(), std::size_t{0});
        co_return std::vector<int>(v.begin(), v.end()) == want&& calls == want_calls;
      }(n));
      CHECK(r);
    }
  }
  SECTION("n = 0: empty, gen never called") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      bool called = false;
      auto v = co_await weft::spawn_many<3>(0, [&called](std::size_t) {
        called = true;
        return square(1);
      });
      co_return v.empty() && !called;
    }());
    CHECK(r);
  }
  SECTION("n > N: std::length_error, gen never called") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      bool called = false;
      try {
        (void)co_await weft::spawn_many<3>(4, [&called](std::size_t) {
          called = true;
          return square(1);
        });
      } catch (const std::length_error&) {
        co_return !called;
      }
      co_return false;
    }());
    CHECK(r);
  }
  SECTION("void children all run") {
    std::atomic<std::size_t> n{0};
    std::atomic<int> live{0};
    weft::sync_wait(pool, [](std::atomic<std::size_t>& count, std::atomic<int>& alive) -> weft::task<void> {
      co_await weft::spawn_many<16>(
          13, [&](std::size_t) { return weft_test::count_run(count, weft_test::tracker{alive}); });
    }(n, live));
    CHECK(n == 13);
    CHECK(live == 0);
  }
  SECTION("move-only results") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      auto v = co_await weft::spawn_many<6>(5, [](std::size_t i) -> weft::task<std::unique_ptr<int>> {
        co_return std::make_unique<int>(static_cast<int>(i));
      });
      bool ok = v.size() == 5;
      for (std::size_t i = 0; i < v.size(); ++i) ok = ok && v[i] && *v[i] == static_cast<int>(i);
      co_return ok;
    }());
    CHECK(r);
  }
  SECTION("children's exceptions: the lowest index wins, after all finished") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& runs) -> weft::task<int> {
                                        auto v = co_await weft::spawn_many<10>(9, [&runs](std::size_t i) {
                                          return maybe_throws(static_cast<int>(i), i == 5 || i == 8, runs);
                                        });
                                        co_return static_cast<int>(v.size());
                                      }(ran)),
                      "child 5");
    CHECK(ran == 9);
  }
  SECTION("gen throws: nothing runs, the tasks made so far are freed") {
    std::atomic<int> live{0};
    auto r = weft::sync_wait(pool, [](std::atomic<int>& runs, std::atomic<int>& alive) -> weft::task<bool> {
      try {
        (void)co_await weft::spawn_many<8>(6, [&](std::size_t i) {
          if (i == 4) throw std::runtime_error("gen failed");
          return [](weft_test::tracker, std::atomic<int>& n) -> weft::task<int> {
            n.fetch_add(1, std::memory_order_relaxed);
            co_return 0;
          }(weft_test::tracker{alive}, runs);
        });
      } catch (const std::runtime_error& e) {
        co_return std::string(e.what()) == "gen failed";
      }
      co_return false;
    }(ran, live));
    CHECK(r);
    CHECK(ran == 0);
    CHECK(live == 0);
  }
  SECTION("a recursive search with 0..4 children per node") {
    std::atomic<long> seen{0};
    const long nodes = weft::sync_wait(pool, bounded_tree(3, 14, seen));
    CHECK(nodes == bounded_tree_seq(3, 14));
    CHECK(nodes == 39'077);
    CHECK(seen == nodes);
  }
}

TEMPLATE_LIST_TEST_CASE("spawn_many: void tasks all run", "[spawn_many]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> n{0};
  weft::sync_wait(pool, [](std::atomic<int>& count) -> weft::task<void> {
    std::vector<weft::task<void>> ts;
    for (int i = 0; i < 64; ++i) ts.push_back(increment(count));
    co_await weft::spawn_many(std::move(ts));
    std::array<weft::task<void>, 2> pair{increment(count), increment(count)};
    co_await weft::spawn_many(std::move(pair));
    // No children at all: ready at once, in every form.
    co_await weft::spawn_many(std::vector<weft::task<void>>{});
    co_await weft::spawn_many(std::array<weft::task<void>, 0>{});
    co_await weft::spawn_many<4>(0, [&count](std::size_t) { return increment(count); });
    auto none = co_await weft::spawn_many(std::array<weft::task<int>, 0>{});
    static_assert(std::is_same_v<decltype(none), std::array<int, 0>>);
  }(n));
  CHECK(n == 66);
}

TEMPLATE_LIST_TEST_CASE("spawn_many: the lowest-index exception is rethrown after all children finished",
                        "[spawn_many]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};

  SECTION("vector") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& runs) -> weft::task<std::vector<int>> {
                                        std::vector<weft::task<int>> ts;
                                        for (int i = 0; i < 32; ++i)
                                          ts.push_back(maybe_throws(i, i == 7 || i == 3 || i == 31, runs));
                                        co_return co_await weft::spawn_many(std::move(ts));
                                      }(ran)),
                      "child 3");
    CHECK(ran == 32);
  }
  SECTION("the last (inline) child only") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& runs) -> weft::task<std::vector<int>> {
                                        std::vector<weft::task<int>> ts;
                                        for (int i = 0; i < 8; ++i) ts.push_back(maybe_throws(i, i == 7, runs));
                                        co_return co_await weft::spawn_many(std::move(ts));
                                      }(ran)),
                      "child 7");
    CHECK(ran == 8);
  }
  SECTION("array") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& runs) -> weft::task<std::array<int, 3>> {
                                        std::array<weft::task<int>, 3> ts{maybe_throws(0, false, runs),
                                                                          maybe_throws(1, true, runs),
                                                                          maybe_throws(2, true, runs)};
                                        co_return co_await weft::spawn_many(std::move(ts));
                                      }(ran)),
                      "child 1");
    CHECK(ran == 3);
  }
}

TEMPLATE_LIST_TEST_CASE("spawn_many: the generator forms, exceptions", "[spawn_many]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> ran{0};

  SECTION("children: the lowest index wins, after all finished") {
    CHECK_THROWS_WITH(weft::sync_wait(pool,
                                      [](std::atomic<int>& runs) -> weft::task<std::array<int, 6>> {
                                        co_return co_await weft::spawn_many<6>([&runs](std::size_t i) {
                                          return maybe_throws(static_cast<int>(i), i == 2 || i == 4, runs);
                                        });
                                      }(ran)),
                      "child 2");
    CHECK(ran == 6);
  }
  SECTION("gen throws: nothing runs, the tasks made so far are freed, the error reaches the caller") {
    std::atomic<int> live{0};
    const auto gen_throws = [](std::atomic<int>& runs, std::atomic<int>& alive, bool fixed) -> weft::task<int> {
      const auto gen = [&](std::size_t i) {
        if (i == 3) throw std::runtime_error("gen failed");
        return [](weft_test::tracker, std::atomic<int>& r) -> weft::task<int> {
          r.fetch_add(1, std::memory_order_relaxed);
          co_return 0;
        }(weft_test::tracker{alive}, runs);
      };
      try {
        if (fixed)
          (void)co_await weft::spawn_many<5>(gen);
        else
          (void)co_await weft::spawn_many(std::size_t{5}, gen);
      } catch (const std::runtime_error& e) {
        co_return std::string(e.what()) == "gen failed" ? 1 : 0;
      }
      co_return 0;
    };
    CHECK(weft::sync_wait(pool, gen_throws(ran, live, true)) == 1);
    CHECK(weft::sync_wait(pool, gen_throws(ran, live, false)) == 1);
    CHECK(ran == 0);
    CHECK(live == 0);
  }
  SECTION("gen returns an empty task: std::logic_error before anything runs") {
    // 0: spawn_many(n, gen), 1: spawn_many<N>(n, gen), 2: spawn_many<N>(gen); the empty
    // task first, in the middle, last.
    for (const int form : {0, 1, 2}) {
      for (const std::size_t empty_at : {0, 1, 3}) {
        auto r = weft::sync_wait(pool, [](std::atomic<int>& runs, int f, std::size_t at) -> weft::task<bool> {
          const auto gen = [&runs, at](std::size_t i) {
            return i == at ? weft::task<int>{} : maybe_throws(static_cast<int>(i), false, runs);
          };
          try {
            if (f == 1)
              (void)co_await weft::spawn_many<6>(4, gen);
            else if (f == 2)
              (void)co_await weft::spawn_many<4>(gen);
            else
              (void)co_await weft::spawn_many(std::size_t{4}, gen);
          } catch (const std::logic_error&) {
            co_return true;
          }
          co_return false;
        }(ran, form, empty_at));
        CHECK(r);
      }
    }
    CHECK(ran == 0);
  }
}

// spawn_many's awaitable may be held and awaited later: its children, made on one
// executor's thread, are forked where the co_await runs (here another executor, whose
// threads cannot free the frames from their own frame stacks); one never awaited
// destroys its children unstarted.
TEMPLATE_LIST_TEST_CASE("spawn_many: generator forms awaited after moving to another executor", "[spawn_many]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  weft::thread_pool other{{.threads = 2}};
  auto r = weft::sync_wait(pool, [](weft::executor& there) -> weft::task<std::vector<int>> {
    auto fixed = weft::spawn_many<5>([](std::size_t i) { return square(static_cast<int>(i)); });
    auto bounded = weft::spawn_many<8>(std::size_t{3}, [](std::size_t i) { return square(static_cast<int>(i) + 5); });
    auto vec = weft::spawn_many(std::size_t{4}, [](std::size_t i) { return square(static_cast<int>(i) + 10); });
    auto unused = weft::spawn_many<3>([](std::size_t i) { return square(static_cast<int>(i)); });  // never awaited
    co_await weft::resume_on(there);
    std::vector<int> out;
    for (int v : co_await std::move(vec)) out.push_back(v);
    for (int v : co_await std::move(fixed)) out.push_back(v);
    for (int v : co_await std::move(bounded)) out.push_back(v);
    co_return out;
  }(other));
  CHECK(r == std::vector<int>{100, 121, 144, 169, 0, 1, 4, 9, 16, 25, 36, 49});
}

TEMPLATE_LIST_TEST_CASE("spawn_many: an empty task in the range throws std::logic_error", "[spawn_many]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
    auto ts = squares(4);
    ts[2] = weft::task<int>{};
    try {
      (void)co_await weft::spawn_many(std::move(ts));
    } catch (const std::logic_error&) {
      co_return true;
    }
    co_return false;
  }());
  CHECK(r);
}

weft::task<unsigned> my_priority() { co_return weft::current_priority(); }

TEMPLATE_LIST_TEST_CASE("spawn_many: children run at the parent's priority, the parent keeps it", "[spawn_many]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  REQUIRE(pool.priorities() >= 3);
  for (unsigned prio : {0u, 2u}) {
    auto r = weft::sync_wait(
        pool,
        []() -> weft::task<std::pair<std::vector<unsigned>, unsigned>> {
          std::vector<weft::task<unsigned>> ts;
          for (int i = 0; i < 16; ++i) ts.push_back(my_priority());
          auto seen = co_await weft::spawn_many(std::move(ts));
          co_return std::pair{std::move(seen), weft::current_priority()};
        }(),
        prio);
    CHECK(r.first == std::vector<unsigned>(16, prio));
    CHECK(r.second == prio);
  }
}

TEMPLATE_LIST_TEST_CASE("spawn_many: wide and nested fan-outs", "[spawn_many]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("10,000 children") {
    auto sum = weft::sync_wait(pool, []() -> weft::task<long> {
      auto v = co_await weft::spawn_many(squares(10'000));
      co_return std::accumulate(v.begin(), v.end(), 0L);
    }());
    CHECK(sum == 333'283'335'000L);
  }
  SECTION("recursive halving over [0, 2^18)") {
    constexpr std::uint64_t n = 1u << 18;
    CHECK(weft::sync_wait(pool, range_sum(0, n)) == n * (n - 1) / 2);
  }
}

namespace {

// A parameter with a destructor: counts the live copies.
struct counted {
  explicit counted(std::atomic<int>& live) : m_live(&live) { m_live->fetch_add(1, std::memory_order_relaxed); }
  counted(const counted& o) : m_live(o.m_live) { m_live->fetch_add(1, std::memory_order_relaxed); }
  counted& operator=(const counted&) = delete;
  ~counted() { m_live->fetch_sub(1, std::memory_order_relaxed); }
  std::atomic<int>* m_live;
};

weft::task<int> with_counted(int i, counted) { co_return i; }

// Reads its parameter only when it runs: a frame freed too early and reused shows.
weft::task<int> times_three(int v) { co_return v * 3; }

}  // namespace

// After a join, spawn_many frees children whose frames are the top of the thread's frame
// stack in one step (weft/detail/bulk.hpp, release_joined_frames); these are the cases
// where it must not, or must free more than the frames.
TEMPLATE_LIST_TEST_CASE("spawn_many: children's frames are freed exactly once, other frames kept", "[spawn_many]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("frames made between the children stay alive") {
    // Each generator call first makes a task that outlives the join, so its frame lies
    // between two children's frames; it must survive the children's release and the
    // frames made after it.
    auto r = weft::sync_wait(pool, []() -> weft::task<std::pair<int, int>> {
      std::vector<weft::task<int>> later;
      auto v = co_await weft::spawn_many<8>([&](std::size_t i) {
        later.push_back(times_three(static_cast<int>(i) + 100));
        return square(static_cast<int>(i));
      });
      auto again = co_await weft::spawn_many<8>([](std::size_t i) { return square(static_cast<int>(i) + 1); });
      int kept = 0;
      for (auto& t : later) kept += co_await std::move(t);
      co_return std::pair{std::accumulate(v.begin(), v.end(), 0) + std::accumulate(again.begin(), again.end(), 0),
                          kept};
    }());
    CHECK(r.first == 140 + 204);            // squares of 0..7, then of 1..8
    CHECK(r.second == 3 * (8 * 100 + 28));  // 3 * (100 + ... + 107)
  }
  SECTION("parameters with a destructor are destroyed") {
    std::atomic<int> live{0};
    auto sum = weft::sync_wait(pool, [](std::atomic<int>& n) -> weft::task<int> {
      auto v =
          co_await weft::spawn_many<6>([&](std::size_t i) { return with_counted(static_cast<int>(i), counted(n)); });
      auto w = co_await weft::spawn_many<6>(
          std::size_t{3}, [&](std::size_t i) { return with_counted(static_cast<int>(i), counted(n)); });
      co_return std::accumulate(v.begin(), v.end(), 0) + std::accumulate(w.begin(), w.end(), 0);
    }(live));
    CHECK(sum == 15 + 3);
    CHECK(live.load() == 0);
  }
  SECTION("results with a destructor, and the vector forms") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::size_t> {
      auto strings = co_await weft::spawn_many<4>([](std::size_t i) -> weft::task<std::string> {
        co_return std::string(40 + i, 'x');  // past the small-string buffer: heap, freed by ~string
      });
      auto v = co_await weft::spawn_many(squares(50));
      auto w = co_await weft::spawn_many(std::size_t{20}, [](std::size_t i) { return square(static_cast<int>(i)); });
      std::size_t total = 0;
      for (const auto& s : strings) total += s.size();
      co_return total + v.size() + w.size();
    }());
    CHECK(r == 40 + 41 + 42 + 43 + 50 + 20);
  }
  SECTION("a join that throws frees every frame") {
    std::atomic<int> ran{0};
    auto caught = weft::sync_wait(pool, [](std::atomic<int>& n) -> weft::task<bool> {
      for (int round = 0; round < 50; ++round) {
        try {
          (void)co_await weft::spawn_many<5>(
              [&](std::size_t i) { return maybe_throws(static_cast<int>(i), i == 2, n); });
        } catch (const std::runtime_error&) {
          continue;
        }
        co_return false;
      }
      auto v = co_await weft::spawn_many<5>([](std::size_t i) { return square(static_cast<int>(i)); });
      co_return std::accumulate(v.begin(), v.end(), 0) == 30;
    }(ran));
    CHECK(caught);
    CHECK(ran.load() == 250);
  }
}

TEST_CASE("spawn_many(...).run_on and spawn_tuple(...).run_on run the children on the other executor",
          "[spawn_many][spawn_tuple]") {
  weft::thread_pool home{{.threads = 1}};
  weft::thread_pool cpu{{.threads = 2, .priorities = 3}};
  auto on_cpu = [&]() -> weft::task<int> { co_return cpu.owns_current_thread() ? 1 : 0; };
  auto r = weft::sync_wait(home, [&]() -> weft::task<bool> {
    std::vector<weft::task<int>> ts;
    for (int i = 0; i < 100; ++i) ts.push_back(on_cpu());
    auto v = co_await weft::spawn_many(std::move(ts)).run_on(cpu);
    const bool all_on_cpu = std::accumulate(v.begin(), v.end(), 0) == 100;
    const bool back_home = home.owns_current_thread();
    // Fixed-count generator form, at a priority of the other pool.
    auto a = co_await weft::spawn_many<8>([&](std::size_t) { return on_cpu(); }).run_on(cpu).priority(2);
    const bool array_on_cpu = std::accumulate(a.begin(), a.end(), 0) == 8;
    // void children.
    std::atomic<int> voids{0};
    co_await weft::spawn_many(4, [&](std::size_t) -> weft::task<void> {
      return [](weft::thread_pool& p, std::atomic<int>& n) -> weft::task<void> {
        if (p.owns_current_thread()) n.fetch_add(1, std::memory_order_relaxed);
        co_return;
      }(cpu, voids);
    }).run_on(cpu);
    auto [x, y] = co_await weft::spawn(weft::spawn_tuple(on_cpu(), on_cpu())).run_on(cpu);
    const bool tuple_back_home = home.owns_current_thread();
    // spawn_tuple's own run_on, then at a priority of the other pool.
    auto [x2, y2] = co_await weft::spawn_tuple(on_cpu(), on_cpu()).run_on(cpu);
    auto [x3, y3] = co_await weft::spawn_tuple(on_cpu(), on_cpu()).run_on(cpu).priority(2);
    co_return all_on_cpu&& back_home&& array_on_cpu&& voids.load() == 4 && x + y == 2 &&
        tuple_back_home&& x2 + y2 == 2 && x3 + y3 == 2 && home.owns_current_thread();
  }());
  CHECK(r);
}

TEST_CASE("spawn_many(...).run_on: the lowest-index exception comes back to the caller's executor", "[spawn_many]") {
  weft::thread_pool home{{.threads = 1}};
  weft::thread_pool cpu{{.threads = 2}};
  auto r = weft::sync_wait(home, [&]() -> weft::task<bool> {
    bool threw = false;
    try {
      co_await weft::spawn_many(6, [](std::size_t i) -> weft::task<int> {
        return [](std::size_t k) -> weft::task<int> {
          if (k % 2 == 1) throw std::runtime_error("child " + std::to_string(k));
          co_return static_cast<int>(k);
        }(i);
      }).run_on(cpu);
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()) == "child 1";
    }
    co_return threw&& home.owns_current_thread();
  }());
  CHECK(r);
}
