// weft/barrier.hpp: nobody leaves a phase before everyone arrived; phases repeat;
// arrive_and_drop; tasks and threads together.
#include <weft/barrier.hpp>

#include <weft/fork_group.hpp>
#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using weft_test::expect;

constexpr int k_phases = 200;

struct phases {
  std::atomic<int> arrived[k_phases] = {};
};

weft::task<void> participant(weft::barrier& b, phases& p, int parties) {
  for (int k = 0; k < k_phases; ++k) {
    p.arrived[k].fetch_add(1, std::memory_order_relaxed);
    const std::size_t phase = co_await b.arrive_and_wait();
    expect(phase == static_cast<std::size_t>(k));
    expect(p.arrived[k].load(std::memory_order_relaxed) == parties);  // all arrived before anyone left
  }
}

}  // namespace

TEST_CASE("barrier: zero participants is an error", "[barrier]") {
  CHECK_THROWS_AS(weft::barrier{0}, std::invalid_argument);
}

TEMPLATE_LIST_TEST_CASE("barrier: tasks and a thread pass phase after phase together", "[barrier]",
                        weft_test::executor_kinds) {
  weft_test::g_failures = 0;
  WEFT_TEST_EXECUTOR(pool);
  constexpr int k_tasks = 4, k_parties = k_tasks + 1;
  weft::barrier b{k_parties};
  phases p;
  std::thread t([&] {
    for (int k = 0; k < k_phases; ++k) {
      p.arrived[k].fetch_add(1, std::memory_order_relaxed);
      expect(b.arrive_and_wait_blocking() == static_cast<std::size_t>(k));
      expect(p.arrived[k].load(std::memory_order_relaxed) == k_parties);
    }
  });
  auto body = [&]() -> weft::task<void> {
    weft::fork_group<void> g;
    for (int i = 0; i < k_tasks; ++i) g.fork(participant(b, p, k_parties));
    co_await g.join();
  };
  weft::sync_wait(pool, body());
  t.join();
  CHECK(b.phase() == k_phases);
  CHECK(weft_test::g_failures.load() == 0);
}

TEST_CASE("barrier: arrive_and_drop completes the phase and shrinks the next ones", "[barrier]") {
  weft::barrier b{3};
  std::atomic<int> passed{0};
  std::thread t1([&] {
    b.arrive_and_wait_blocking();
    passed.fetch_add(1);
    b.arrive_and_wait_blocking();  // phase 1: only two parties left
    passed.fetch_add(1);
  });
  b.arrive_and_drop();
  CHECK(b.phase() == 0);
  b.arrive_and_wait_blocking();  // the third arrival of phase 0
  REQUIRE(weft_test::eventually([&] { return passed.load() >= 1; }));
  b.arrive_and_wait_blocking();  // with t1: phase 1 complete
  t1.join();
  CHECK(passed.load() == 2);
  CHECK(b.phase() == 2);
}
