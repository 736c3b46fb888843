// Stress test of weft::channel's lock-free element stores: detail::mpmc_ring (bounded)
// and detail::mpmc_list (unbounded), with several producer and consumer threads at
// once and no lock anywhere. Every element pushed with `ok` must be popped exactly once
// (and every one rejected never), each producer's elements in the order it pushed them,
// every element destroyed exactly once, across ring laps, block links and retirements,
// blocks cut from huge-page chunks (a long backlog), a close at a random moment, and a
// store destroyed with elements left. Run under ThreadSanitizer by tests/run.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "sync.hpp"
#include "weft/detail/mpmc_list.hpp"
#include "weft/detail/mpmc_ring.hpp"

namespace {

using weft::detail::store_status;

std::atomic<long> g_live{0};  // elements constructed and not yet destroyed

/// An element that says who pushed it, in which order, and whether it is intact. `Pad`
/// bytes more make it big, so that a list block holds few and blocks change often.
template <std::size_t Pad>
struct element {
  element(std::uint32_t producer, std::uint32_t seq) noexcept
      : m_producer(producer), m_seq(seq), m_check(~(std::uint64_t{producer} << 32 | seq)) {
    g_live.fetch_add(1, std::memory_order_relaxed);
  }
  element(element&& o) noexcept : m_producer(o.m_producer), m_seq(o.m_seq), m_check(o.m_check) {
    g_live.fetch_add(1, std::memory_order_relaxed);
  }
  element(const element&) = delete;
  element& operator=(const element&) = delete;
  ~element() { g_live.fetch_sub(1, std::memory_order_relaxed); }
  bool intact() const noexcept { return m_check == ~(std::uint64_t{m_producer} << 32 | m_seq); }

  std::uint32_t m_producer;
  std::uint32_t m_seq;
  std::uint64_t m_check;
  std::array<unsigned char, Pad> m_pad{};
};

constexpr int k_producers = 3;
constexpr int k_consumers = 3;

/// What one round saw.
struct tally {
  std::vector<std::atomic<std::uint8_t>> m_popped;  // times each (producer, seq) came out
  std::vector<std::uint8_t> m_accepted;             // its push said ok (one writer each)
  std::atomic<std::size_t> m_out_of_order{0};
  std::atomic<std::size_t> m_torn{0};
  std::uint32_t m_per_producer;

  explicit tally(std::uint32_t per_producer)
      : m_popped(std::size_t{per_producer} * k_producers),
        m_accepted(std::size_t{per_producer} * k_producers),
        m_per_producer(per_producer) {}
  std::size_t index(std::uint32_t producer, std::uint32_t seq) const {
    return std::size_t{producer} * m_per_producer + seq;
  }
};

/// `Store` pushed by k_producers threads and popped by k_consumers threads; closed at
/// a random moment when `close_early`, else once every producer finished. Full/empty
/// make a thread yield and try again (the stores never block).
template <class Store, class Element>
void one_round(Store& store, std::uint32_t per_producer, bool close_early, std::mt19937& rng) {
  tally t(per_producer);
  std::atomic<int> producers_done{0};
  std::atomic<bool> close_now{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < k_producers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint32_t seq = 0; seq < per_producer; ++seq) {
        store_status s;
        while ((s = store.try_push(Element(static_cast<std::uint32_t>(p), seq))) == store_status::full)
          std::this_thread::yield();
        t.m_accepted[t.index(static_cast<std::uint32_t>(p), seq)] = s == store_status::ok ? 1 : 0;
      }
      producers_done.fetch_add(1);
    });
  }
  for (int c = 0; c < k_consumers; ++c) {
    threads.emplace_back([&] {
      std::array<std::int64_t, k_producers> last;
      last.fill(-1);
      for (;;) {
        const store_status s = store.try_pop([&](Element&& e) noexcept {
          if (!e.intact() || e.m_producer >= k_producers || e.m_seq >= t.m_per_producer) {
            t.m_torn.fetch_add(1);
            return;
          }
          t.m_popped[t.index(e.m_producer, e.m_seq)].fetch_add(1, std::memory_order_relaxed);
          if (static_cast<std::int64_t>(e.m_seq) <= last[e.m_producer]) t.m_out_of_order.fetch_add(1);
          last[e.m_producer] = e.m_seq;
        });
        if (s == store_status::closed) return;
        if (s == store_status::empty) std::this_thread::yield();
      }
    });
  }
  const auto close_after = std::uniform_int_distribution<int>(0, 3000)(rng);
  threads.emplace_back([&] {
    if (close_early) {
      for (int i = 0; i < close_after && producers_done.load() < k_producers; ++i) std::this_thread::yield();
    } else {
      while (producers_done.load() < k_producers) std::this_thread::yield();
    }
    CHECK(store.close());
    CHECK_FALSE(store.close());  // once
    close_now = true;
  });
  for (auto& th : threads) th.join();
  CHECK(close_now.load());
  CHECK(store.closed());
  CHECK(t.m_torn.load() == 0);
  CHECK(t.m_out_of_order.load() == 0);
  std::size_t lost = 0, doubled = 0, ghost = 0, accepted = 0;
  for (std::size_t i = 0; i < t.m_popped.size(); ++i) {
    const unsigned n = t.m_popped[i].load();
    accepted += t.m_accepted[i];
    if (t.m_accepted[i] == 1 && n == 0) ++lost;
    if (n > 1) ++doubled;
    if (t.m_accepted[i] == 0 && n != 0) ++ghost;
  }
  CHECK(lost == 0);
  CHECK(doubled == 0);
  CHECK(ghost == 0);  // a rejected push never comes out
  if (!close_early) CHECK(accepted == t.m_popped.size());
  CHECK(store.size() == 0);
  // After the close, pushes fail and pops say closed (drained).
  CHECK(store.try_push(Element(0, 0)) == store_status::closed);
  CHECK(store.try_pop([](Element&&) noexcept {}) == store_status::closed);
}

const std::uint32_t k_per_producer = static_cast<std::uint32_t>(weft_test::rounds(40'000, 4'000));

}  // namespace

TEST_CASE("mpmc_ring stress: exactly once, in order per producer, across laps and a close", "[channel][stress]") {
  using small = element<0>;
  std::mt19937 rng{20261206};
  for (const std::size_t capacity : {std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
    for (const bool close_early : {false, true}) {
      INFO("capacity " << capacity << (close_early ? ", closed early" : ""));
      {
        weft::detail::mpmc_ring<small> ring(capacity);
        one_round<weft::detail::mpmc_ring<small>, small>(ring, k_per_producer, close_early, rng);
      }
      CHECK(g_live.load() == 0);
    }
  }
}

TEST_CASE("mpmc_list stress: exactly once, in order per producer, across blocks and a close", "[channel][stress]") {
  using big = element<496>;  // 16 per lap: a block link every 15 elements
  using small = element<0>;
  std::mt19937 rng{20261207};
  for (const bool close_early : {false, true}) {
    INFO((close_early ? "closed early" : "closed at the end"));
    {
      weft::detail::mpmc_list<big> list;
      one_round<weft::detail::mpmc_list<big>, big>(list, k_per_producer, close_early, rng);
    }
    CHECK(g_live.load() == 0);
    {
      weft::detail::mpmc_list<small> list;
      one_round<weft::detail::mpmc_list<small>, small>(list, k_per_producer, close_early, rng);
    }
    CHECK(g_live.load() == 0);
  }
}

TEST_CASE("mpmc_list stress: a long backlog is cut from chunks, drained by many, then freed", "[channel][stress]") {
  using big = element<496>;
  // Pushed first by one thread (blocks from chunks once the backlog passes 8 blocks),
  // then popped by three at once while a fourth keeps pushing.
  const std::uint32_t n = static_cast<std::uint32_t>(weft_test::rounds(60'000, 8'000));
  {
    weft::detail::mpmc_list<big> list;
    for (std::uint32_t i = 0; i < n; ++i) REQUIRE(list.try_push(big(0, i)) == store_status::ok);
    CHECK(list.size() == n);
    std::atomic<std::uint64_t> popped{0};
    std::atomic<std::size_t> wrong{0};
    std::atomic<bool> pushing_done{false};
    std::vector<std::thread> threads;
    threads.emplace_back([&] {
      for (std::uint32_t i = 0; i < n; ++i) REQUIRE(list.try_push(big(1, i)) == store_status::ok);
      pushing_done = true;
    });
    for (int c = 0; c < 3; ++c) {
      threads.emplace_back([&] {
        std::array<std::int64_t, 2> last{-1, -1};
        for (;;) {
          const bool done = pushing_done.load();
          const store_status s = list.try_pop([&](big&& e) noexcept {
            if (!e.intact() || e.m_producer > 1 || static_cast<std::int64_t>(e.m_seq) <= last[e.m_producer])
              wrong.fetch_add(1);
            else
              last[e.m_producer] = e.m_seq;
            popped.fetch_add(1);
          });
          if (s == store_status::empty && done) return;
          if (s == store_status::empty) std::this_thread::yield();
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(wrong.load() == 0);
    CHECK(popped.load() == 2ull * n);
    CHECK(list.size() == 0);
  }
  CHECK(g_live.load() == 0);
}

TEST_CASE("mpmc stores destroyed with elements left destroy each once", "[channel][stress]") {
  using big = element<496>;
  {
    weft::detail::mpmc_list<big> list;
    for (std::uint32_t i = 0; i < 1000; ++i) REQUIRE(list.try_push(big(0, i)) == store_status::ok);
    for (std::uint32_t i = 0; i < 333; ++i) REQUIRE(list.try_pop([](big&&) noexcept {}) == store_status::ok);
    CHECK(g_live.load() == 667);
  }
  CHECK(g_live.load() == 0);
  {
    weft::detail::mpmc_ring<element<0>> ring(10);
    for (std::uint32_t i = 0; i < 25; ++i) {  // wraps twice
      REQUIRE(ring.try_push(element<0>(0, i)) == store_status::ok);
      if (i >= 3) REQUIRE(ring.try_pop([](element<0>&&) noexcept {}) == store_status::ok);
    }
    CHECK(ring.size() == 3);
    CHECK(ring.try_push(element<0>(0, 99)) == store_status::ok);
    CHECK(g_live.load() == 4);
  }
  CHECK(g_live.load() == 0);
}
