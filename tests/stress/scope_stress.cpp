// weft::scope under contention (run under ThreadSanitizer by tests/run): a million
// short children reaped with bounded memory, and a long-lived scope<T> of a million
// whose values stay bounded; children finishing while the owner waits in next() and
// join(); stop requests racing children that finish on their own; exceptions of
// children and of the owner racing the others' ends, never rethrown with one alive.
#include <weft/scope.hpp>

#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/resume_on.hpp>
#include <weft/semaphore.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <stop_token>
#include <thread>

namespace {

using weft_test::rounds;

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

weft::task<void> tick_tracked(std::atomic<std::size_t>& n, weft_test::tracker) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

// Ends on its own after `spins` polls, or earlier when its token is stopped.
weft::task<int> polls_until_stop(int spins) {
  for (int i = 0; i < spins; ++i) {
    if (co_await weft::this_task::stop_requested()) co_return 1;
    std::this_thread::yield();
  }
  co_return 0;
}

// A value of some size that counts its live copies.
struct payload {
  weft_test::tracker t;
  std::array<char, 256> bytes{};
};

// Returns a payload; its permit goes back to `slots` (the owner's throttle), if any,
// as it ends.
weft::task<payload> make_payload(std::atomic<int>& live, weft::semaphore* slots) {
  payload p{weft_test::tracker{live}};
  if (slots != nullptr) slots->release();
  co_return p;
}

// Counts, as its frame goes, one child ended (however it ended).
struct count_end {
  std::atomic<int>* n;
  ~count_end() { n->fetch_add(1, std::memory_order_relaxed); }
};

// One child in five throws after a few hops through the pool's queues; the others
// wait until stopped (weft::cancelled, which the scope counts as a stop).
weft::task<void> fails_or_waits(weft::executor& ex, int i, std::atomic<int>& ended) {
  const count_end end{&ended};
  if (i % 5 == 0) {
    for (int k = 0; k < i % 3; ++k) co_await weft::resume_on(ex);
    throw std::runtime_error("child");
  }
  weft::manual_reset_event never;
  co_await never.wait();
}

}  // namespace

// Spawns `total` short children with at most 1,000 alive (next() until fewer are
// alive before each spawn), through spawn(fn, args...); returns the children next() reported, and
// the most child frames seen alive at a spawn (each child's frame holds a tracker).
struct churn_result {
  std::size_t reported;
  int most_alive;
};
churn_result churn(weft::thread_pool& pool, std::size_t total, std::atomic<std::size_t>& ran) {
  std::atomic<int> live{0};
  return weft::sync_wait(pool, [&]() -> weft::task<churn_result> {
    weft::scope s;
    std::size_t seen = 0;
    int most = 0;
    // Awaited values go into variables first, never into a loop condition: g++-12.2
    // miscompiles a co_await there (README, requirements).
    for (std::size_t i = 0; i < total; ++i) {
      while (s.size() >= 1000) {
        const bool got = co_await s.next();
        seen += got ? 1 : 0;
      }
      most = std::max(most, live.load(std::memory_order_relaxed));
      s.spawn(tick_tracked, std::ref(ran), weft_test::tracker{live});
    }
    for (;;) {
      const bool got = co_await s.next();
      if (!got) break;
      ++seen;
    }
    co_await s.join();
    co_return churn_result{seen, most};
  }());
}

TEST_CASE("scope stress: a million short children, at most 1,000 alive, are reaped at once", "[scope][stress]") {
  const std::size_t total = static_cast<std::size_t>(rounds(1'000'000, 50'000));
  for (std::size_t threads : {1, 2}) {
    weft::thread_pool pool{{.threads = threads}};
    std::atomic<std::size_t> ran{0};
    churn(pool, 10'000, ran);  // warm up: the workers' frame caches, the allocator's arenas
    const long before = max_rss_kib();
    const churn_result r = churn(pool, total, ran);
    const long grew = max_rss_kib() - before;
    CHECK(r.reported == total);
    CHECK(ran.load() == total + 10'000);
    // Frames alive never pass the children alive (1,000) plus those finishing meanwhile.
    CHECK(r.most_alive <= 1000 + 64);
    WARN(threads << " thread(s): max RSS grew by " << grew << " KiB over " << total << " children; at most "
                 << r.most_alive << " child frames alive");
    CHECK(grew < 4 * 1024);  // memory follows the children alive, not those ever spawned
  }
}

TEST_CASE("scope stress: stop requests race children that finish by themselves", "[scope][stress]") {
  weft::thread_pool pool{{.threads = 4}};
  const int iterations = rounds(2'000, 200);
  std::size_t stopped_total = 0;
  for (int it = 0; it < iterations; ++it) {
    std::stop_source outside;
    std::thread stopper([&] { outside.request_stop(); });
    auto r = weft::sync_wait(pool, [&]() -> weft::task<std::pair<int, int>> {
      weft::scope<int> s{outside.get_token()};
      for (int i = 0; i < 16; ++i) s.spawn(polls_until_stop(i % 4));
      int values = 0;
      int stopped = 0;
      for (;;) {
        const auto v = co_await s.next();
        if (!v) break;
        ++values;
        stopped += *v;
      }
      co_await s.join();
      co_return std::pair{values, stopped};
    }());
    stopper.join();
    REQUIRE(r.first == 16);  // every child reported exactly once, stopped or not
    stopped_total += static_cast<std::size_t>(r.second);
  }
  WARN(stopped_total << " of " << iterations * 16 << " children saw the stop");
}

TEST_CASE("scope stress: a long-lived scope<T> that never calls next keeps no values with keep_values false",
          "[scope][stress]") {
  const int total = rounds(1'000'000, 50'000);
  constexpr int k_alive = 1000;
  for (std::size_t threads : {1, 2}) {
    weft::thread_pool pool{{.threads = threads}};
    std::atomic<int> live{0};
    const auto t0 = std::chrono::steady_clock::now();
    const int most = weft::sync_wait(pool, [&]() -> weft::task<int> {
      weft::scope<payload> s{{.keep_values = false}};
      weft::semaphore slots{k_alive};
      int most_live = 0;
      for (int i = 0; i < total; ++i) {
        co_await slots.acquire();  // at most k_alive children between their start and their value
        most_live = std::max(most_live, live.load(std::memory_order_relaxed));
        s.spawn(make_payload, std::ref(live), &slots);
      }
      co_await s.join();  // the only join, after a million children
      co_return most_live;
    }());
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    WARN(threads << " thread(s): " << total << " children in " << ms << " ms; at most " << most
                 << " payloads alive at a spawn");
    // Values are dropped as their children end: only those of children alive (and a
    // few finishing meanwhile) exist, never one per child ever spawned.
    CHECK(most <= k_alive + 64);
    CHECK(live.load() == 0);
  }
}

TEST_CASE("scope stress: a long-lived scope<T> drained by next keeps the values bounded", "[scope][stress]") {
  const int total = rounds(1'000'000, 50'000);
  constexpr int k_alive = 1000;
  weft::thread_pool pool{{.threads = 2}};
  std::atomic<int> live{0};
  const auto r = weft::sync_wait(pool, [&]() -> weft::task<std::pair<int, int>> {
    weft::scope<payload> s;
    int most_live = 0;
    int taken = 0;
    for (int i = 0; i < total; ++i) {
      if (i >= k_alive) {  // one value taken per child spawned: alive plus kept stays k_alive
        const auto v = co_await s.next();
        taken += v ? 1 : 0;
      }
      most_live = std::max(most_live, live.load(std::memory_order_relaxed));
      s.spawn(make_payload, std::ref(live), nullptr);
    }
    for (;;) {
      const auto v = co_await s.next();
      if (!v) break;
      ++taken;
    }
    co_return std::pair{most_live, taken};
  }());
  CHECK(r.second == total);
  CHECK(r.first <= k_alive + 64);  // children alive and values kept, never one per child spawned
  CHECK(live.load() == 0);
}

TEST_CASE("scope stress: exceptions race the siblings' ends; next, join and with_scope rethrow with none alive",
          "[scope][stress]") {
  std::atomic<int> reported{0};  // children's exceptions hidden by the owner's (with_scope)
  weft::thread_pool pool{{.threads = 4, .on_unhandled_exception = [&](std::exception_ptr) {
                            reported.fetch_add(1, std::memory_order_relaxed);
                          }}};
  const int iterations = rounds(2'000, 200);
  int failures = 0;
  for (int it = 0; it < iterations; ++it) {
    std::atomic<int> ended{0};
    const int kind = it % 3;
    const bool ok = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      if (kind == 2) {  // the owner throws while children throw and end
        try {
          co_await weft::with_scope([&](weft::scope<>& s) -> weft::task<void> {
            for (int i = 0; i < 16; ++i) s.spawn(fails_or_waits(pool, i + it, ended));
            co_await weft::resume_on(pool);
            throw std::logic_error("owner");
          });
        } catch (const std::logic_error&) {
          co_return ended.load() == 16;
        }
        co_return false;
      }
      weft::scope<> s;
      for (int i = 0; i < 16; ++i) s.spawn(fails_or_waits(pool, i + it, ended));
      bool threw = false;
      try {
        if (kind == 0) {
          for (;;) {
            const bool got = co_await s.next();
            if (!got) break;
          }
        } else {
          co_await weft::resume_on(pool);
          s.request_stop();  // the others end; some may have thrown first
          co_await s.join();
        }
      } catch (const std::runtime_error&) {
        threw = true;
      }
      // next() (kind 0) always meets the exception of child 0, 5, 10 or 15 (i + it).
      co_return ended.load() == 16 && s.size() == 0 && (kind == 1 || threw);
    }());
    failures += ok ? 0 : 1;
  }
  CHECK(failures == 0);
  WARN(reported.load() << " children's exceptions were reported as hidden by the owner's");
}
