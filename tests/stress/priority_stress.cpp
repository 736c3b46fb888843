// Priority ordering: with the only worker busy, queued work at priority 0 runs before
// queued work at priority 2, whether it was posted from outside or forked locally.
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <cstddef>
#include <latch>
#include <vector>

namespace {

using weft_test::gate;

// Appends its priority to `order`. Only one worker exists, so appends never race.
weft::task<void> record(std::vector<unsigned>& order, std::latch& done) {
  order.push_back(weft::current_priority());
  done.count_down();
  co_return;
}

bool zeros_before_twos(const std::vector<unsigned>& order) {
  bool seen_two = false;
  for (unsigned p : order) {
    if (p == 2) seen_two = true;
    if (p == 0 && seen_two) return false;
  }
  return true;
}

// Forks interleaved priority-2 and priority-0 children, detached, then returns.
weft::task<void> fork_interleaved(std::vector<unsigned>& order, std::latch& done, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) weft::spawn(record(order, done)).priority(i % 2 == 0 ? 2 : 0).detach();
  co_return;
}

} // namespace

TEST_CASE("stress: posted work at priority 0 runs before priority 2 behind a busy worker", "[stress][priority]") {
  constexpr std::size_t k_tasks = 2'000;
  for (int round = 0; round < weft_test::rounds(50, 10); ++round) {
    std::vector<unsigned> order;
    order.reserve(k_tasks);
    std::latch done{static_cast<std::ptrdiff_t>(k_tasks)};
    gate started;
    gate release;
    weft::thread_pool pool{{.threads = 1, .priorities = 3}};
    weft::post(pool, weft_test::hold_worker(started, release), 1);
    started.wait();
    for (std::size_t i = 0; i < k_tasks; ++i) weft::post(pool, record(order, done), i % 2 == 0 ? 2 : 0);
    release.open();
    done.wait();
    REQUIRE(order.size() == k_tasks);
    REQUIRE(zeros_before_twos(order));
  }
}

TEST_CASE("stress: forked work at priority 0 runs before priority 2 on one worker", "[stress][priority]") {
  constexpr std::size_t k_tasks = 2'000;
  for (int round = 0; round < weft_test::rounds(50, 10); ++round) {
    std::vector<unsigned> order;
    order.reserve(k_tasks);
    std::latch done{static_cast<std::ptrdiff_t>(k_tasks)};
    weft::thread_pool pool{{.threads = 1, .priorities = 3}};
    weft::post(pool, fork_interleaved(order, done, k_tasks), 1);
    done.wait();
    REQUIRE(order.size() == k_tasks);
    REQUIRE(zeros_before_twos(order));
  }
}
