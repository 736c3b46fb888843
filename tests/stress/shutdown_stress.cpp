// Shutdown with pending work: a pool destroyed while posts are queued and while plain
// threads keep posting. Documented behaviour (weft/pool.hpp): posts from outside are
// refused with shutdown_error once destruction began; everything accepted, and all
// it spawns, runs to completion; nothing leaks.
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <latch>
#include <optional>
#include <thread>
#include <vector>

namespace {

using weft_test::gate;
using weft_test::tracker;

// Counts itself and a detached child it spawns (spawned during shutdown: must run too).
weft::task<void> count_and_spawn(std::atomic<std::size_t>& ran, tracker t) {
  weft::spawn(weft_test::count_run(ran, t)).detach();
  ran.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

}  // namespace

TEST_CASE("stress: pool destroyed with posts queued behind a busy worker", "[stress][shutdown]") {
  for (int round = 0; round < weft_test::rounds(50, 5); ++round) {
    weft_test::pool_in_shutdown p;  // the probes were queued behind the held worker
    REQUIRE(p.probes_accepted() >= weft_test::pool_in_shutdown::k_queued_before);
    p.finish();
    REQUIRE(p.probes_ran() == p.probes_accepted());
    REQUIRE(p.probes_alive() == 0);
  }
}

TEST_CASE("stress: 8 threads keep posting while the pool is destroyed", "[stress][shutdown]") {
  constexpr std::size_t k_posters = 8;
  for (std::size_t threads : {1u, 2u, 4u}) {
    for (int round = 0; round < weft_test::rounds(10, 2); ++round) {
      std::atomic<std::size_t> ran{0};
      std::atomic<std::size_t> accepted{0};
      std::atomic<std::size_t> refused{0};
      std::atomic<int> live{0};
      gate started;
      gate release;
      std::optional<weft::thread_pool> pool;
      pool.emplace(weft::pool_options{.threads = threads});
      weft::thread_pool* raw = &*pool;
      // Hold one worker so the destructor cannot finish (and free the pool) while the
      // posters may still call post on it.
      weft::post(*raw, weft_test::hold_worker(started, release));
      started.wait();

      std::latch warmed{static_cast<std::ptrdiff_t>(k_posters)};
      std::vector<std::thread> posters;
      for (std::size_t t = 0; t < k_posters; ++t)
        posters.emplace_back([&, t] {
          for (std::size_t i = 0;; ++i) {
            try {
              weft::post(*raw, count_and_spawn(ran, tracker{live}), static_cast<unsigned>((t + i) % 4));
              accepted.fetch_add(1, std::memory_order_relaxed);
            } catch (const weft::shutdown_error&) {
              refused.fetch_add(1, std::memory_order_relaxed);
              break;
            }
            if (i == 100) warmed.count_down();
          }
        });
      warmed.wait();
      std::thread destroyer([&] { pool.reset(); });
      for (auto& t : posters) t.join();
      release.open();
      destroyer.join();

      INFO("threads " << threads << ", round " << round << ", accepted " << accepted.load());
      REQUIRE(refused == k_posters);
      REQUIRE(ran == 2 * accepted);
      REQUIRE(live == 0);
    }
  }
}
