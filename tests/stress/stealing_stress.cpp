// Stealing under contention: many small forks on oversubscribed pools, several
// external threads driving the same pool, every result checked.
#include <weft/fork_group.hpp>
#include <weft/pool.hpp>
#include <weft/spawn.hpp>
#include <weft/spawn_many.hpp>
#include <weft/spawn_tuple.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

// Sum of [lo, hi): fork the left half, run the right half inline, join.
weft::task<std::uint64_t> fork_sum(std::uint64_t lo, std::uint64_t hi) {
  if (hi - lo == 1) co_return lo;
  const auto mid = lo + (hi - lo) / 2;
  auto left = weft::spawn(fork_sum(lo, mid)).fork();
  const auto right = co_await fork_sum(mid, hi);
  co_return co_await left + right;
}

// The same shape through the other fork-join APIs, switching by depth.
weft::task<std::uint64_t> mixed_sum(std::uint64_t lo, std::uint64_t hi, unsigned depth) {
  if (hi - lo <= 2) {
    std::uint64_t s = 0;
    for (auto i = lo; i < hi; ++i) s += i;
    co_return s;
  }
  const auto mid = lo + (hi - lo) / 2;
  switch (depth % 3) {
    case 0: {
      auto [a, b] = co_await weft::spawn_tuple(mixed_sum(lo, mid, depth + 1), mixed_sum(mid, hi, depth + 1));
      co_return a + b;
    }
    case 1: {
      std::vector<weft::task<std::uint64_t>> ts;
      ts.push_back(mixed_sum(lo, mid, depth + 1));
      ts.push_back(mixed_sum(mid, hi, depth + 1));
      auto r = co_await weft::spawn_many(std::move(ts));
      co_return r[0] + r[1];
    }
    default: {
      weft::fork_group<std::uint64_t> g;
      g.fork(mixed_sum(lo, mid, depth + 1));
      g.fork(mixed_sum(mid, hi, depth + 1));
      auto r = co_await g.join();
      co_return r[0] + r[1];
    }
  }
}

constexpr std::uint64_t gauss(std::uint64_t n) { return n * (n - 1) / 2; }

} // namespace

TEMPLATE_LIST_TEST_CASE("stress: a binary fork tree of 2^17 leaves, many rounds", "[stress]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  constexpr std::uint64_t n = 1u << 17;
  for (int round = 0; round < weft_test::rounds(40, 4); ++round)
    REQUIRE(weft::sync_wait(pool, fork_sum(0, n)) == gauss(n));
}

TEMPLATE_LIST_TEST_CASE("stress: spawn_tuple, spawn_many and fork_group interleaved", "[stress]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  constexpr std::uint64_t n = 1u << 16;
  for (int round = 0; round < weft_test::rounds(30, 3); ++round)
    REQUIRE(weft::sync_wait(pool, mixed_sum(0, n, static_cast<unsigned>(round))) == gauss(n));
}

TEST_CASE("stress: four external threads drive fork trees on one pool at once", "[stress]") {
  auto pool = weft_test::pool_4::make();
  constexpr std::uint64_t n = 1u << 15;
  const int per_driver = weft_test::rounds(30, 3);
  std::atomic<int> right{0};
  std::vector<std::thread> drivers;
  for (int d = 0; d < 4; ++d)
    drivers.emplace_back([&, d] {
      for (int round = 0; round < per_driver; ++round) {
        const auto lo = static_cast<std::uint64_t>(d) * n;
        const auto got = weft::sync_wait(pool, fork_sum(lo, lo + n), static_cast<unsigned>(d % 4));
        if (got == gauss(lo + n) - gauss(lo)) right.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (auto& t : drivers) t.join();
  CHECK(right == 4 * per_driver);
}
