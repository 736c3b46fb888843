// weft/group.hpp under contention: many groups at once from fork-join tasks, at
// several priorities, with more members than workers (fibers), barriers, reduce,
// re-armed claim spaces and occasional failures. Run under ThreadSanitizer.
#include <weft/group.hpp>

#include <weft/pool.hpp>
#include <weft/spawn_many.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

namespace {

struct outcome {
  std::uint64_t sum = 0;
  bool failed = false;
};

/// One group: two phases over [0, n) (every index claimed once per phase), a barrier
/// between them, a reduce at the end; member `fail_at` throws in phase 2 if < members.
weft::task<outcome> one_group(weft::executor& ex, unsigned prio, std::size_t members, std::size_t n,
                              std::size_t fail_at, std::atomic<int>& claimed_twice) {
  outcome out;
  try {
    co_await weft::dispatch(ex, {.members = members, .priority = prio, .range = n}, [&](weft::group& g) {
      auto& marks = g.shared<std::vector<std::atomic<std::uint8_t>>>(n);
      std::uint64_t part = 0;
      for (auto r = g.claim(3); r; r = g.claim(3))
        for (auto i : r) {
          if (marks[i].fetch_add(1, std::memory_order_relaxed) != 0) claimed_twice.fetch_add(1);
          part += i;
        }
      g.next_phase(n);
      for (auto r = g.claim(5); r; r = g.claim(5))
        for (auto i : r) {
          if (g.index() == fail_at) throw std::runtime_error("planned");
          if (marks[i].fetch_add(1, std::memory_order_relaxed) != 1) claimed_twice.fetch_add(1);
          part += i;
        }
      g.barrier();
      const auto total = g.reduce(part, std::plus<>{});
      if (g.index() == 0) out.sum = total;
    });
  } catch (const std::runtime_error&) {
    out.failed = true;
  }
  co_return out;
}

}  // namespace

TEST_CASE("group stress: concurrent groups, fibers, failures", "[group][stress]") {
  for (std::size_t threads : {std::size_t{2}, std::size_t{4}}) {
    weft::thread_pool pool{{.threads = threads, .priorities = 3}};
    std::atomic<int> claimed_twice{0};
    const int rounds = weft_test::rounds(100, 30);
    for (int round = 0; round < rounds; ++round) {
      constexpr int k_groups = 8;
      std::vector<std::size_t> fail_at(k_groups);
      std::vector<std::size_t> members(k_groups);
      std::vector<std::size_t> sizes(k_groups);
      auto root = [&]() -> weft::task<std::vector<outcome>> {
        std::vector<weft::task<outcome>> ts;
        for (int i = 0; i < k_groups; ++i) {
          members[i] = 1 + static_cast<std::size_t>((round * 7 + i * 3) % 9);
          sizes[i] = 200 + static_cast<std::size_t>(round * 13 + i);
          fail_at[i] = (round + i) % 5 == 0 ? static_cast<std::size_t>(i) % members[i] : 1000;
          ts.push_back(one_group(pool, static_cast<unsigned>(i % 3), members[i], sizes[i], fail_at[i], claimed_twice));
        }
        co_return co_await weft::spawn_many(std::move(ts));
      };
      const auto outs = weft::sync_wait(pool, root());
      for (int i = 0; i < k_groups; ++i) {
        const std::uint64_t n = sizes[i];
        // A planned failure only fires if that member got a claim in phase 2.
        if (outs[i].failed) {
          REQUIRE(fail_at[i] < members[i]);
        } else {
          REQUIRE(outs[i].sum == n * (n - 1));
        }
      }
    }
    CHECK(claimed_twice.load() == 0);
  }
}
