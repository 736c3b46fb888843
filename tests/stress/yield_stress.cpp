// yield_if_requested: a long low-priority loop that yields lets high-priority work
// posted from outside run before the loop finishes.
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/yield.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <latch>
#include <vector>

namespace {

using weft_test::gate;

constexpr long k_limit = 20'000'000;  // bounds a loop that yield never interrupts

struct low_result {
  bool saw_high = false;
};

// Yields in a loop until the high-priority task has run (or the bound is hit).
weft::task<void> low_loop(gate& started, const std::atomic<bool>& high_ran, low_result& out, std::latch& done) {
  started.open();
  for (long i = 0; i < k_limit && !high_ran.load(std::memory_order_acquire); ++i) co_await weft::yield_if_requested();
  out.saw_high = high_ran.load(std::memory_order_acquire);
  done.count_down();
}

weft::task<void> high(std::atomic<bool>& ran, std::latch& done) {
  ran.store(true, std::memory_order_release);
  done.count_down();
  co_return;
}

}  // namespace

TEST_CASE("stress: a yielding low-priority loop lets a posted high-priority task run first", "[stress][yield]") {
  for (std::size_t threads : {1u, 2u}) {
    for (int round = 0; round < weft_test::rounds(50, 5); ++round) {
      std::atomic<bool> high_ran{false};
      std::vector<low_result> lows(threads);
      std::vector<gate> started(threads);
      std::latch done{static_cast<std::ptrdiff_t>(threads + 1)};
      weft::thread_pool pool{{.threads = threads, .priorities = 2}};
      // One low loop per worker: every worker is busy when the high task arrives.
      for (std::size_t i = 0; i < threads; ++i) weft::post(pool, low_loop(started[i], high_ran, lows[i], done), 1);
      for (auto& s : started) s.wait();
      weft::post(pool, high(high_ran, done), 0);
      done.wait();
      INFO("threads " << threads << ", round " << round);
      for (auto& l : lows) REQUIRE(l.saw_high);
    }
  }
}
