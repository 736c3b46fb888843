// Fibers migrating between workers and between pools while they await: every fiber
// finishes exactly once with the right sum, sees fresh thread-locals after every
// resumption, and keeps its exception state across threads. Run under TSan.
#include <weft/fiber.hpp>

#include <weft/pool.hpp>
#include <weft/resume_on.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

weft::task<std::uint64_t> value_of(std::uint64_t x) { co_return x; }

// std::this_thread::get_id() is pthread_self(), declared __attribute__((const)): the
// compiler may reuse one call's result across an await. Read it through a pointer it
// cannot see through (fiber.hpp documents this for user code).
std::thread::id (*volatile g_thread_id)() = [] { return std::this_thread::get_id(); };

struct outcome {
  std::uint64_t sum = 0;
  int fresh_tls = 0;  // resumptions that saw the right executor in thread-locals
  int hops = 0;       // resumptions that changed thread
  bool exception_ok = false;
};

/// One fiber's life: awaits of every kind, hopping between pools a and b.
outcome life(weft::thread_pool& a, weft::thread_pool& b, std::uint64_t id, int steps) {
  outcome o;
  std::thread::id last = g_thread_id();
  auto note_thread = [&] {
    if (g_thread_id() != last) ++o.hops;
    last = g_thread_id();
  };
  for (int s = 0; s < steps; ++s) {
    weft::thread_pool& to = s % 2 == 0 ? b : a;
    weft::await(weft::resume_on(to));
    note_thread();
    o.fresh_tls += to.owns_current_thread() && weft::current_executor() == &to ? 1 : 0;
    auto forked = weft::spawn(value_of(id + static_cast<std::uint64_t>(s))).fork();
    o.sum += weft::await(value_of(1));
    o.sum += weft::await(forked);
    note_thread();
    if (s % 4 == 0) {
      auto child = weft::spawn_fiber([id] { return id; });  // on the current pool
      o.sum += weft::await(child);
      note_thread();
    }
  }
  try {
    throw std::runtime_error(std::to_string(id));
  } catch (const std::runtime_error&) {
    weft::await(weft::resume_on(b));
    weft::await(weft::resume_on(a));
    try {
      throw;
    } catch (const std::runtime_error& e) {
      o.exception_ok = e.what() == std::to_string(id) && std::uncaught_exceptions() == 0;
    }
  }
  return o;
}

std::uint64_t expected_sum(std::uint64_t id, int steps) {
  std::uint64_t sum = 0;
  for (int s = 0; s < steps; ++s) sum += 1 + id + static_cast<std::uint64_t>(s) + (s % 4 == 0 ? id : 0);
  return sum;
}

weft::task<std::vector<outcome>> run_all(weft::thread_pool& a, weft::thread_pool& b, int fibers, int steps) {
  std::vector<weft::fiber_handle<outcome>> hs;
  for (int i = 0; i < fibers; ++i)
    hs.push_back(weft::spawn_fiber([&a, &b, i, steps] { return life(a, b, static_cast<std::uint64_t>(i), steps); },
                                   {.executor = i % 3 == 0 ? &b : &a, .priority = static_cast<unsigned>(i % 2)}));
  std::vector<outcome> out;
  for (auto& h : hs) out.push_back(co_await h);
  co_return out;
}

}  // namespace

TEST_CASE("many fibers migrate between workers and pools", "[fiber][stress]") {
  weft::thread_pool a{{.threads = 3, .priorities = 2}};
  weft::thread_pool b{{.threads = 2, .priorities = 2}};
  const int fibers = weft_test::rounds(2000, 200);
  const int steps = weft_test::rounds(40, 12);
  const std::vector<outcome> out = weft::sync_wait(a, run_all(a, b, fibers, steps));
  REQUIRE(out.size() == static_cast<std::size_t>(fibers));
  int total_hops = 0;
  for (int i = 0; i < fibers; ++i) {
    const outcome& o = out[static_cast<std::size_t>(i)];
    REQUIRE(o.sum == expected_sum(static_cast<std::uint64_t>(i), steps));
    REQUIRE(o.fresh_tls == steps);
    REQUIRE(o.exception_ok);
    total_hops += o.hops;
  }
  REQUIRE(total_hops >= fibers * (steps - 1));  // every resume_on but maybe the first switches pools
}

TEST_CASE("fire-and-forget fibers all run exactly once", "[fiber][stress]") {
  weft::thread_pool pool{{.threads = 4}};
  const int fibers = weft_test::rounds(20000, 2000);
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(fibers));
  std::atomic<int> finished{0};
  weft_test::gate all;
  std::thread spawners[2];
  for (int t = 0; t < 2; ++t) {
    spawners[t] = std::thread([&, t] {
      for (int i = t; i < fibers; i += 2) {
        weft::spawn_fiber(
            [&, i] {
              weft::await(weft::resume_on(pool));
              runs[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
              if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == fibers) all.open();
            },
            {.executor = &pool})
            .detach();
      }
    });
  }
  for (auto& s : spawners) s.join();
  all.wait();
  for (auto& r : runs) REQUIRE(r.load() == 1);
}
