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

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
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

}  // namespace

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

namespace {

// A wide spawn_many whose children take very different times (a pseudo-random spin),
// nested two levels, so that thieves take siblings in the middle of the join chain and
// finish them before, during and after the chain reaches them (weft/detail/bulk.hpp).
// Child i of a node with `fail_at` == i throws; the lowest such index must win.
weft::task<std::uint64_t> uneven_child(std::uint64_t seed, unsigned depth, int fail_at, int index) {
  std::uint64_t x = seed * 6364136223846793005u + 1442695040888963407u;
  const unsigned spins = static_cast<unsigned>((x >> 33) % 4000);
  volatile unsigned sink = 0;  // volatile: the compiler keeps the wait
  for (unsigned i = 0; i < spins; ++i) sink = i;
  (void)sink;
  if (index == fail_at) throw std::runtime_error("child " + std::to_string(index));
  if (depth == 0) co_return seed;
  std::vector<weft::task<std::uint64_t>> kids;
  for (std::uint64_t k = 0; k < 12; ++k)
    kids.push_back(uneven_child(seed * 12 + k, depth - 1, -1, static_cast<int>(k)));
  std::uint64_t s = 0;
  for (auto v : co_await weft::spawn_many(std::move(kids))) s += v;
  co_return s;
}

std::uint64_t uneven_expected(std::uint64_t seed, unsigned depth) {
  if (depth == 0) return seed;
  std::uint64_t s = 0;
  for (std::uint64_t k = 0; k < 12; ++k) s += uneven_expected(seed * 12 + k, depth - 1);
  return s;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("stress: spawn_many joins children stolen anywhere in the chain", "[stress]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  for (int round = 0; round < weft_test::rounds(200, 20); ++round) {
    const auto seed = static_cast<std::uint64_t>(round) + 1;
    const auto got = weft::sync_wait(pool, [](std::uint64_t s) -> weft::task<std::uint64_t> {
      std::vector<weft::task<std::uint64_t>> ts;
      for (std::uint64_t k = 0; k < 12; ++k) ts.push_back(uneven_child(s * 12 + k, 1, -1, static_cast<int>(k)));
      std::uint64_t sum = 0;
      for (auto v : co_await weft::spawn_many(std::move(ts))) sum += v;
      co_return sum;
    }(seed));
    REQUIRE(got == uneven_expected(seed, 2));
    // Two failing children: the lower index is rethrown, after every child finished.
    const int a = round % 12, b = (round * 7 + 3) % 12;
    REQUIRE_THROWS_WITH(
        weft::sync_wait(pool,
                        [](std::uint64_t s, int fa, int fb) -> weft::task<std::uint64_t> {
                          std::vector<weft::task<std::uint64_t>> ts;
                          for (int k = 0; k < 12; ++k)
                            ts.push_back(uneven_child(s + static_cast<std::uint64_t>(k), 1, k == fb ? k : fa, k));
                          std::uint64_t sum = 0;
                          for (auto v : co_await weft::spawn_many(std::move(ts))) sum += v;
                          co_return sum;
                        }(seed, a, b)),
        "child " + std::to_string(std::min(a, b)));
  }
}

namespace {

// As uneven_child, with the children in spawn_many's array and bounded forms: their
// frames are freed in one step when they are the top of the joining thread's frame stack
// (weft/detail/bulk.hpp, release_joined_frames), one by one otherwise (a child stolen,
// the parent resumed by a thief). A frame freed twice, or one freed while a sibling still
// uses it, shows as a wrong sum (or a crash) once the memory is reused.
weft::task<std::uint64_t> uneven_fixed(std::uint64_t seed, unsigned depth) {
  std::uint64_t x = seed * 6364136223846793005u + 1442695040888963407u;
  const unsigned spins = static_cast<unsigned>((x >> 33) % 3000);
  volatile unsigned sink = 0;
  for (unsigned i = 0; i < spins; ++i) sink = i;
  (void)sink;
  if (depth == 0) co_return seed;
  std::uint64_t s = 0;
  if (depth % 2 == 0) {
    for (auto v : co_await weft::spawn_many<12>([&](std::size_t k) { return uneven_fixed(seed * 12 + k, depth - 1); }))
      s += v;
  } else {
    const std::size_t n = 1 + seed % 12;  // 1..12 of up to 12
    for (auto v :
         co_await weft::spawn_many<12>(n, [&](std::size_t k) { return uneven_fixed(seed * 12 + k, depth - 1); }))
      s += v;
  }
  co_return s;
}

std::uint64_t uneven_fixed_expected(std::uint64_t seed, unsigned depth) {
  if (depth == 0) return seed;
  const std::size_t n = depth % 2 == 0 ? 12 : 1 + seed % 12;
  std::uint64_t s = 0;
  for (std::uint64_t k = 0; k < n; ++k) s += uneven_fixed_expected(seed * 12 + k, depth - 1);
  return s;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("stress: spawn_many's array and bounded forms free stolen and inline children alike",
                        "[stress]", weft_test::all_executors) {
  auto pool = TestType::make();
  for (int round = 0; round < weft_test::rounds(60, 6); ++round) {
    const auto seed = static_cast<std::uint64_t>(round) + 7;
    REQUIRE(weft::sync_wait(pool, uneven_fixed(seed, 3)) == uneven_fixed_expected(seed, 3));
  }
}
