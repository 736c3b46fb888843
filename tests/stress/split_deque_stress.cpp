// Stress test of weft::detail::split_deque (the lock-free deque under every worker):
// one owner pushes and pops (sharing when asked) while thieves steal; every item must be
// taken exactly once, whatever the interleaving. Run under ThreadSanitizer by tests/run.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "sync.hpp"
#include "weft/detail/split_deque.hpp"

namespace {

// Items are the addresses of slots in `taken`; each records how often it was taken.
struct item_table {
  explicit item_table(std::size_t n) : taken(n) {}
  void* item(std::size_t i) { return &taken[i]; }
  void take(void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1, std::memory_order_relaxed); }
  std::vector<std::atomic<int>> taken;
};

void run_round(int thieves, std::size_t items, unsigned burst) {
  weft::detail::split_deque d;
  item_table table(items);
  std::atomic<bool> owner_done{false};
  std::atomic<std::size_t> stolen{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < thieves; ++t) {
    ts.emplace_back([&] {
      unsigned attempts = 0;
      for (;;) {
        // Every other attempt the way a worker does it: snapshot, leave lone items.
        const std::uint64_t w = d.snapshot();
        void* p = (++attempts & 1) != 0 ? d.steal()
                  : weft::detail::split_deque::shared_count(w) == 0 || weft::detail::split_deque::lone(w)
                      ? nullptr
                      : d.steal_from(w);
        if (p != nullptr) {
          table.take(p);
          stolen.fetch_add(1, std::memory_order_relaxed);
        } else if (owner_done.load(std::memory_order_acquire)) {
          return;
        }
      }
    });
  }
  // Owner: pushes in bursts, pops some back, answers share requests.
  std::size_t next = 0, popped = 0;
  while (next < items) {
    for (unsigned i = 0; i < burst && next < items; ++i) REQUIRE(d.push(table.item(next++)));
    if (d.share_requested()) d.share();
    for (unsigned i = 0; i < burst / 2; ++i)
      if (void* p = d.pop()) {
        table.take(p);
        ++popped;
      }
  }
  while (void* p = d.pop()) {  // drain what is left (private and shared)
    table.take(p);
    ++popped;
  }
  owner_done.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  REQUIRE(popped + stolen.load() == items);
  for (std::size_t i = 0; i < items; ++i) {
    INFO("item " << i);
    REQUIRE(table.taken[i].load() == 1);
  }
}

}  // namespace

TEST_CASE("stress: split_deque hands every item out exactly once", "[stress][split_deque]") {
  const int rounds = weft_test::rounds(40, 8);
  for (int r = 0; r < rounds; ++r) {
    run_round(1, 20000, 1 + r % 7);
    run_round(3, 20000, 2 + r % 13);
  }
}

TEST_CASE("stress: split_deque share_all publishes everything to thieves", "[stress][split_deque]") {
  weft::detail::split_deque d;
  item_table table(1000);
  for (std::size_t i = 0; i < 1000; ++i) REQUIRE(d.push(table.item(i)));
  REQUIRE(d.share_all());
  std::atomic<std::size_t> got{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&] {
      while (got.load() < 1000)
        if (void* p = d.steal()) {
          table.take(p);
          got.fetch_add(1);
        }
    });
  for (auto& t : ts) t.join();
  REQUIRE(d.pop() == nullptr);
  for (auto& c : table.taken) REQUIRE(c.load() == 1);
}

TEST_CASE("split_deque: push fails when full; the oldest item is stolen first", "[split_deque]") {
  weft::detail::split_deque d;
  static int cells[2];
  REQUIRE(d.free_slots() == weft::detail::split_deque::k_capacity);
  REQUIRE(d.push(&cells[0]));
  REQUIRE(d.push(&cells[1]));
  REQUIRE(d.steal() == nullptr);  // nothing shared yet: this asks the owner to share
  REQUIRE(d.share_requested());
  REQUIRE(d.share());  // shares half (one item): the oldest
  REQUIRE(d.steal() == &cells[0]);
  REQUIRE(d.pop() == &cells[1]);
  REQUIRE(d.pop() == nullptr);
  for (std::uint32_t i = 0; i < weft::detail::split_deque::k_capacity; ++i) REQUIRE(d.push(&cells[0]));
  REQUIRE_FALSE(d.push(&cells[0]));
}

TEST_CASE("split_deque: a lone item is marked, and only one is shared per credit", "[split_deque]") {
  using weft::detail::split_deque;
  split_deque d;
  static int cells[3];
  REQUIRE(d.push(&cells[0]));
  REQUIRE(d.worth_sharing());  // one private item, lone credit
  REQUIRE(d.share());
  std::uint64_t w = d.snapshot();
  REQUIRE(split_deque::shared_count(w) == 1);
  REQUIRE(split_deque::lone(w));
  // The owner takes it back (as a join does): the thief's snapshot is stale now.
  REQUIRE(d.pop() == &cells[0]);
  REQUIRE(d.steal_from(w) == nullptr);
  // The credit is spent: one private item is not worth sharing any more...
  REQUIRE(d.push(&cells[0]));
  REQUIRE_FALSE(d.worth_sharing());
  // ...two are, and sharing half of them is not lone.
  REQUIRE(d.push(&cells[1]));
  REQUIRE(d.worth_sharing());
  REQUIRE(d.share());
  w = d.snapshot();
  REQUIRE(split_deque::shared_count(w) == 1);
  REQUIRE_FALSE(split_deque::lone(w));
  REQUIRE(d.steal_from(w) == &cells[0]);
  REQUIRE(d.pop() == &cells[1]);
  REQUIRE(d.pop() == nullptr);  // everything shared was stolen: the credit comes back
  REQUIRE(d.push(&cells[2]));
  REQUIRE(d.worth_sharing());
  d.restore_lone_credit();
  REQUIRE(d.pop() == &cells[2]);
  // Work that is not a forked child (a wake-up) is shared plainly, even when alone.
  REQUIRE(d.push(&cells[2]));
  REQUIRE(d.share(false));
  w = d.snapshot();
  REQUIRE(split_deque::shared_count(w) == 1);
  REQUIRE_FALSE(split_deque::lone(w));
  REQUIRE(d.steal_from(w) == &cells[2]);
}

TEST_CASE("split_deque: pop_if_newest takes only the newest private item it names", "[split_deque]") {
  weft::detail::split_deque d;
  static int cells[3];
  REQUIRE_FALSE(d.pop_if_newest(&cells[0]));  // empty
  REQUIRE(d.push(&cells[0]));
  REQUIRE(d.push(&cells[1]));
  REQUIRE(d.push(&cells[2]));
  REQUIRE_FALSE(d.pop_if_newest(&cells[1]));  // not the newest: nothing taken
  REQUIRE(d.pop_if_newest(&cells[2]));
  REQUIRE(d.share());  // publishes the oldest of the two left (cells[0])
  REQUIRE(d.pop_if_newest(&cells[1]));
  // cells[0] is shared now: only pop() (racing thieves) may take it back.
  REQUIRE_FALSE(d.pop_if_newest(&cells[0]));
  REQUIRE(d.steal() == &cells[0]);
  REQUIRE(d.pop() == nullptr);
}
