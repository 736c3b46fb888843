// weft::scope under contention (run under ThreadSanitizer by tests/run): a million
// short children reaped with bounded memory; children finishing while the owner waits
// in next() and join(); stop requests racing children that finish on their own.
#include <weft/scope.hpp>

#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
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
