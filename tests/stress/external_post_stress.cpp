// Posts and sync_waits from many plain threads at once: every task runs exactly once.
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <cstddef>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t k_threads = 8;
constexpr std::size_t k_posts_per_thread = 4'000;

weft::task<void> hit(std::atomic<unsigned>& slot, std::latch& done) {
  slot.fetch_add(1, std::memory_order_relaxed);
  done.count_down();
  co_return;
}

// A posted task that also forks a child before it counts itself.
weft::task<void> hit_and_fork(std::atomic<unsigned>& slot, std::atomic<unsigned>& child_slot, std::latch& done) {
  auto h = weft::spawn(hit(child_slot, done)).fork();
  slot.fetch_add(1, std::memory_order_relaxed);
  co_await h;
  done.count_down();
}

weft::task<std::size_t> echo(std::size_t v) { co_return v; }

// Eight plain threads post concurrently; each post forks a child; all counted once.
template <class Executor>
void post_from_8_threads() {
  constexpr std::size_t total = k_threads * k_posts_per_thread;
  auto slots = std::make_unique<std::atomic<unsigned>[]>(total);
  auto child_slots = std::make_unique<std::atomic<unsigned>[]>(total);
  std::latch done{static_cast<std::ptrdiff_t>(2 * total)};
  std::latch go{static_cast<std::ptrdiff_t>(k_threads)};
  auto pool = Executor::make();  // after what its tasks use: destroyed (and joined) first
  std::vector<std::thread> posters;
  for (std::size_t t = 0; t < k_threads; ++t)
    posters.emplace_back([&, t] {
      go.arrive_and_wait();  // start together
      for (std::size_t i = 0; i < k_posts_per_thread; ++i) {
        const std::size_t id = t * k_posts_per_thread + i;
        weft::post(pool, hit_and_fork(slots[id], child_slots[id], done), static_cast<unsigned>(id % 4));
      }
    });
  for (auto& p : posters) p.join();
  done.wait();
  std::size_t once = 0;
  for (std::size_t i = 0; i < total; ++i)
    once += (slots[i].load(std::memory_order_relaxed) == 1 && child_slots[i].load(std::memory_order_relaxed) == 1);
  CHECK(once == total);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("stress: 8 plain threads post concurrently; every post runs exactly once", "[stress]",
                        weft_test::all_executors) {
  for (int round = 0; round < weft_test::rounds(5, 1); ++round) post_from_8_threads<TestType>();
}

TEMPLATE_LIST_TEST_CASE("stress: 8 plain threads sync_wait on one pool concurrently", "[stress]",
                        weft_test::all_executors) {
  auto pool = TestType::make();
  std::atomic<std::size_t> right{0};
  std::vector<std::thread> waiters;
  for (std::size_t t = 0; t < k_threads; ++t)
    waiters.emplace_back([&, t] {
      for (std::size_t i = 0; i < 500; ++i)
        if (weft::sync_wait(pool, echo(t * 1000 + i), static_cast<unsigned>(i % 4)) == t * 1000 + i)
          right.fetch_add(1, std::memory_order_relaxed);
    });
  for (auto& w : waiters) w.join();
  CHECK(right == k_threads * 500);
}
