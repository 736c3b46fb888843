// weft::channel under contention: exactly-once delivery with a close at a random
// moment, producers and consumers spread over tasks on two pools and plain threads,
// blocking and non-blocking operations mixed; and one producer with one consumer on two
// threads, in order, at capacities 1, 2, 1000 and unbounded; and consumers that race a
// pull of each of two channels with when_any, every element received exactly once. Run
// under ThreadSanitizer.
#include <weft/channel.hpp>

#include <weft/fork_group.hpp>
#include <weft/pool.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>
#include <weft/when_any.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "sync.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <variant>
#include <vector>

namespace {

constexpr int k_task_producers = 3;
constexpr int k_producers = k_task_producers + 1;  // + one plain thread
const std::size_t k_per_producer = static_cast<std::size_t>(weft_test::rounds(3000, 400));

struct shared_state {
  explicit shared_state(std::size_t capacity)
      : ch(capacity), delivered(k_per_producer * k_producers), accepted(k_per_producer * k_producers) {}
  weft::channel<std::uint32_t> ch;
  std::vector<std::atomic<std::uint8_t>> delivered;  // times each id was pulled
  std::vector<std::uint8_t> accepted;                // its push returned true (one writer per id)
  std::atomic<std::size_t> delivered_total{0};
  std::atomic<int> producers_done{0};

  std::atomic<std::size_t> out_of_order{0};  // a consumer saw a producer's ids go down

  /// One consumer's view: the last id it pulled from each producer. Each producer
  /// pushes its ids in increasing order, so in a FIFO channel every consumer sees
  /// each producer's ids increasing.
  struct order_check {
    std::array<std::int64_t, k_producers> last;
    order_check() { last.fill(-1); }
  };

  void take(std::uint32_t id, order_check& seen) {
    delivered[id].fetch_add(1, std::memory_order_relaxed);
    delivered_total.fetch_add(1, std::memory_order_relaxed);
    std::int64_t& last = seen.last[id / k_per_producer];
    if (static_cast<std::int64_t>(id) <= last) out_of_order.fetch_add(1, std::memory_order_relaxed);
    last = id;
  }
  void record_push(std::uint32_t id, bool ok) { accepted[id] = ok ? 1 : 0; }
};

weft::task<void> task_producer(shared_state& s, int p, bool bulk) {
  const std::uint32_t first = static_cast<std::uint32_t>(static_cast<std::size_t>(p) * k_per_producer);
  std::size_t i = 0;
  while (i < k_per_producer) {
    const std::uint32_t id = first + static_cast<std::uint32_t>(i);
    if (bulk && i % 3 == 0) {  // a burst through try_push_n, the rest one by one
      std::uint32_t ids[4];
      const std::size_t n = std::min<std::size_t>(4, k_per_producer - i);
      for (std::size_t k = 0; k < n; ++k) ids[k] = id + static_cast<std::uint32_t>(k);
      const std::size_t pushed = s.ch.try_push_n(ids, n);
      for (std::size_t k = 0; k < pushed; ++k) s.record_push(ids[k], true);
      i += pushed;
      if (pushed != 0) continue;
    }
    s.record_push(id, co_await s.ch.push(id));
    ++i;
  }
  s.producers_done.fetch_add(1, std::memory_order_release);
}

weft::task<void> task_consumer(shared_state& s, bool bulk) {
  shared_state::order_check seen;
  if (bulk) {
    std::vector<std::uint32_t> got;
    for (;;) {
      got.clear();
      if (co_await s.ch.pull_n(std::back_inserter(got), 5) == 0) break;
      for (auto id : got) s.take(id, seen);
    }
  } else {
    while (auto id = co_await s.ch.pull()) s.take(*id, seen);
  }
}

weft::task<void> run_tasks(weft::thread_pool& consumer_pool, shared_state& s) {
  weft::fork_group<void> producers;
  for (int p = 0; p < k_task_producers; ++p) producers.fork(task_producer(s, p, p == 0));
  // Consumers live on the other pool: their wake-ups cross executors.
  std::thread consumers([&] {
    auto body = [&]() -> weft::task<void> {
      weft::fork_group<void> g;
      g.fork(task_consumer(s, false));
      g.fork(task_consumer(s, true));
      co_await task_consumer(s, false);
      co_await g.join();
    };
    weft::sync_wait(consumer_pool, body());
  });
  co_await producers.join();
  consumers.join();  // blocks this worker until the close: fine, the pool has others
}

void one_round(std::mt19937& rng, std::size_t capacity) {
  weft::thread_pool producer_pool{{.threads = 2}};
  weft::thread_pool consumer_pool{{.threads = 2}};
  shared_state s{capacity};
  const std::size_t total = k_per_producer * k_producers;
  const std::size_t close_after = std::uniform_int_distribution<std::size_t>{0, total + total / 4}(rng);

  std::thread thread_producer([&] {
    const auto first = static_cast<std::uint32_t>(k_task_producers * k_per_producer);
    for (std::size_t i = 0; i < k_per_producer; ++i) {
      const std::uint32_t id = first + static_cast<std::uint32_t>(i);
      s.record_push(id, i % 2 == 0 ? s.ch.push_wait(id) : s.ch.try_push(id) == weft::channel_status::ok);
      if (i % 2 == 1 && s.accepted[id] == 0 && !s.ch.closed()) s.record_push(id, s.ch.push_wait(id));
    }
    s.producers_done.fetch_add(1, std::memory_order_release);
  });
  std::thread thread_consumer([&] {
    shared_state::order_check seen;
    std::uint32_t id = 0;
    for (;;) {
      const auto st = s.ch.try_pull(id);
      if (st == weft::channel_status::ok) {
        s.take(id, seen);
      } else if (st == weft::channel_status::closed) {
        break;
      } else if (auto v = s.ch.pull_wait()) {
        s.take(*v, seen);
      } else {
        break;
      }
    }
  });
  std::thread closer([&] {
    while (s.delivered_total.load(std::memory_order_relaxed) < close_after &&
           s.producers_done.load(std::memory_order_acquire) < k_producers)
      std::this_thread::yield();
    s.ch.close();
  });

  std::thread tasks([&] { weft::sync_wait(producer_pool, run_tasks(consumer_pool, s)); });
  thread_producer.join();
  closer.join();
  thread_consumer.join();
  tasks.join();

  std::size_t accepted = 0, delivered = 0, mismatched = 0, duplicated = 0;
  for (std::size_t id = 0; id < total; ++id) {
    const unsigned d = s.delivered[id].load();
    accepted += s.accepted[id];
    delivered += d;
    if (d > 1) ++duplicated;
    if (d != s.accepted[id]) ++mismatched;
  }
  INFO("capacity " << capacity << ", close after " << close_after << " of " << total);
  CHECK(duplicated == 0);
  CHECK(s.out_of_order.load() == 0);  // FIFO per producer, as each consumer sees it
  CHECK(mismatched == 0);             // delivered exactly when accepted: nothing lost, nothing invented
  CHECK(delivered == accepted);
  CHECK(accepted <= total);
  std::uint32_t leftover = 0;
  CHECK(s.ch.try_pull(leftover) == weft::channel_status::closed);  // drained
}

}  // namespace

TEST_CASE("channel stress: exactly-once delivery with a close at a random moment", "[channel][stress]") {
  std::mt19937 rng{20261202};
  const int rounds = weft_test::rounds(16, 4);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t capacity : {std::size_t{1}, std::size_t{3}, std::size_t{64}, weft::channel<int>::unbounded})
      one_round(rng, capacity);
  }
}

namespace {

weft::task<void> count_up(weft::channel<std::uint64_t>& ch, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i)
    if (!co_await ch.push(i)) co_return;
  ch.close();
}

/// Pulls until the end; returns how many elements came out of order (or were missing).
weft::task<std::uint64_t> check_sequence(weft::channel<std::uint64_t>& ch, std::uint64_t n) {
  std::uint64_t next = 0, wrong = 0;
  while (auto v = co_await ch.pull()) {
    if (*v != next) ++wrong;
    next = *v + 1;
  }
  co_return wrong + (next == n ? 0 : 1);
}

weft::task<std::uint64_t> one_to_one(weft::channel<std::uint64_t>& ch, std::uint64_t n) {
  auto consumer = weft::spawn(check_sequence(ch, n)).fork();
  co_await count_up(ch, n);
  co_return co_await consumer;
}

}  // namespace

// One producer and one consumer on two threads: each end of the channel runs under its
// own lock at the same time (the store's push and pull ends meet only through their
// counters), and with a small capacity both park and wake each other all the time.
TEST_CASE("channel stress: one producer and one consumer at once, every element in order", "[channel][stress]") {
  weft::thread_pool pool{{.threads = 2}};
  const auto n = static_cast<std::uint64_t>(weft_test::rounds(300'000, 30'000));
  for (std::size_t capacity : {std::size_t{1}, std::size_t{2}, std::size_t{1000}, weft::channel<int>::unbounded}) {
    weft::channel<std::uint64_t> ch{capacity};
    INFO("capacity " << capacity);
    CHECK(weft::sync_wait(pool, one_to_one(ch, n)) == 0);
    CHECK(ch.size() == 0);
  }
}

namespace {

struct tally {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> sum{0};
  void take(std::uint64_t v) noexcept {
    count.fetch_add(1, std::memory_order_relaxed);
    sum.fetch_add(v, std::memory_order_relaxed);
  }
};

// Pushes `first`, `first + 1`, ... (n of them), alternating between the two channels.
weft::task<void> push_alternating(weft::channel<std::uint64_t>& a, weft::channel<std::uint64_t>& b, std::uint64_t first,
                                  std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool pushed = co_await (i % 2 == 0 ? a : b).push(first + i);
    weft_test::expect(pushed);
  }
}

// Races a pull of each channel until one of them is closed and drained, then drains the
// other by plain pulls. A losing pull that was served anyway hands its element back
// before when_any returns, and this consumer pulls that channel again afterwards.
weft::task<void> pull_racing(weft::channel<std::uint64_t>& a, weft::channel<std::uint64_t>& b, tally& t) {
  for (;;) {
    auto r = co_await weft::when_any(a.pull(), b.pull());
    const std::optional<std::uint64_t> v = std::visit([](auto& o) { return o; }, r.value);
    if (v) {
      t.take(*v);
      continue;
    }
    weft::channel<std::uint64_t>& other = r.index == 0 ? b : a;
    while (auto rest = co_await other.pull()) t.take(*rest);
    co_return;
  }
}

weft::task<void> race_round(weft::channel<std::uint64_t>& a, weft::channel<std::uint64_t>& b, tally& t,
                            std::uint64_t per_producer) {
  constexpr int k_consumers = 3;
  constexpr int k_pushers = 2;
  weft::fork_group<void> consumers;
  for (int c = 0; c < k_consumers; ++c) consumers.fork(pull_racing(a, b, t));
  weft::fork_group<void> producers;
  for (int p = 0; p < k_pushers; ++p)
    producers.fork(push_alternating(a, b, 1 + static_cast<std::uint64_t>(p) * per_producer, per_producer));
  co_await producers.join();
  a.close();
  b.close();
  co_await consumers.join();
}

}  // namespace

// when_any(a.pull(), b.pull()) in a loop on three consumers while two producers push to
// both: the loser of every race is stopped while it may be served at the same moment;
// what it took must go back, so the elements received are exactly the ones pushed.
TEST_CASE("channel stress: when_any pulls of two channels receive every element exactly once", "[channel][stress]") {
  weft::thread_pool pool{{.threads = 4}};
  const auto per_producer = static_cast<std::uint64_t>(weft_test::rounds(100'000, 5'000));
  const std::uint64_t total = 2 * per_producer;  // values 1 .. total, each pushed once
  for (std::size_t capacity : {std::size_t{1}, std::size_t{16}, weft::channel<int>::unbounded}) {
    INFO("capacity " << capacity);
    weft::channel<std::uint64_t> a{capacity}, b{capacity};
    tally t;
    const int failures_before = weft_test::g_failures.load();
    weft::sync_wait(pool, race_round(a, b, t, per_producer));
    CHECK(weft_test::g_failures.load() == failures_before);
    CHECK(t.count.load() == total);
    CHECK(t.sum.load() == total * (total + 1) / 2);
    CHECK(a.size() + b.size() == 0);
  }
}
