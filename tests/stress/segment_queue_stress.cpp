// Stress test of weft::detail::segment_queue (the element store of weft::channel): one
// thread owns the push end and another the pull end, with no lock between them, as a
// producer and a consumer holding the channel's two locks. Every element must come out
// once, in order, and be destroyed once, across segment growth (a long backlog), the
// spare segment going back and forth (a short one), a bounded capacity, and a queue
// destroyed with elements left. Run under ThreadSanitizer by tests/run.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "sync.hpp"
#include "weft/detail/segment_queue.hpp"

namespace {

std::atomic<long> g_live{0};  // elements constructed and not yet destroyed

// 16 bytes, so that a small segment holds 1,024 of them and segments change often.
struct element {
  explicit element(std::uint64_t v) noexcept : value(v), check(~v) { g_live.fetch_add(1, std::memory_order_relaxed); }
  element(element&& o) noexcept : value(o.value), check(o.check) { g_live.fetch_add(1, std::memory_order_relaxed); }
  element(const element&) = delete;
  element& operator=(const element&) = delete;
  ~element() { g_live.fetch_sub(1, std::memory_order_relaxed); }
  std::uint64_t value;
  std::uint64_t check;  // ~value: a torn or stale element shows
};

/// Pushes 0..n-1 from one thread and pops from another. `capacity`: the pusher waits
/// while full(capacity). `burst`: the popper sleeps this often (in elements), so that a
/// backlog builds up. Returns the number of elements that came out wrong.
std::uint64_t run_round(std::uint64_t n, std::size_t capacity, std::uint64_t burst) {
  weft::detail::segment_queue<element> q;
  std::thread pusher([&] {
    for (std::uint64_t i = 0; i < n; ++i) {
      while (q.full(capacity)) std::this_thread::yield();
      q.emplace_back(i);
    }
  });
  std::uint64_t wrong = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    while (q.empty()) std::this_thread::yield();
    const element& e = q.front();
    if (e.value != i || e.check != ~i) ++wrong;
    q.pop_front();
    if (burst != 0 && i % burst == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  pusher.join();
  if (!q.empty() || q.size() != 0) ++wrong;
  return wrong;
}

}  // namespace

TEST_CASE("segment_queue stress: one push end and one pull end, every element once and in order",
          "[segment_queue][stress]") {
  const auto n = static_cast<std::uint64_t>(weft_test::rounds(2'000'000, 200'000));
  constexpr std::size_t unbounded = static_cast<std::size_t>(-1);
  SECTION("unbounded, the popper keeping up (the spare segment reused)") { CHECK(run_round(n, unbounded, 0) == 0); }
  SECTION("unbounded, the popper pausing (a backlog, larger segments)") { CHECK(run_round(n, unbounded, n / 32) == 0); }
  SECTION("bounded at 1,000 (the push end re-reading the pull end's count)") { CHECK(run_round(n, 1000, 0) == 0); }
  SECTION("bounded at 1") { CHECK(run_round(n / 20, 1, 0) == 0); }
  CHECK(g_live.load() == 0);
}

TEST_CASE("segment_queue: destroying a queue destroys the elements left, across segments", "[segment_queue]") {
  {
    weft::detail::segment_queue<element> q;
    for (std::uint64_t i = 0; i < 5000; ++i) q.emplace_back(i);  // several segments
    for (std::uint64_t i = 0; i < 1500; ++i) {
      REQUIRE(!q.empty());
      CHECK(q.front().value == i);
      q.pop_front();
    }
    CHECK(q.size() == 3500);
    CHECK(g_live.load() == 3500);
  }
  CHECK(g_live.load() == 0);
}
