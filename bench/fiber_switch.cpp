// fiber_switch: what a fiber switch costs next to a coroutine's suspend/resume, and
// fib(n) written with fibers next to the same recursion with fork-join tasks.
//
// Flavors (size n, default 30):
//   task, fiber              n * 100,000 suspend/resume round trips of one task, or one
//                            fiber, on an awaitable that resumes its awaiter at once
//                            (symmetric transfer): the bare cost of suspending.
//   task-queue, fiber-queue  the same through the pool's queue (co_await / weft::await
//                            of resume_on(pool)): suspend, push, pop, resume.
//   fib-fj, fib-fiber        fib(n): fork fib(n-1) (spawn(...).fork() or spawn_fiber),
//                            compute fib(n-2) inline, join (co_await or weft::await).
// Besides the report (bench/README.md), switch flavors print `ns_per_round_trip:` of the last
// timed run.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/fib.hpp"

namespace {

using weft_bench::fib_answer;
using weft_bench::fib_fj;

constexpr std::uint64_t k_trips_per_n = 100'000;

enum class kind : std::uint8_t { round_trips, fib };

struct answer {
  kind what;
  std::uint64_t value;
};

double g_ns_per_trip = -1;  // set by the switch flavors: the last run's figure

/// Suspends its awaiter and resumes it right away by symmetric transfer.
struct bounce {
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h) const noexcept { return h; }
  void await_resume() const noexcept {}
};

template <class Body>
answer timed_trips(std::uint64_t trips, Body body) {
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t done = body();
  const auto stop = std::chrono::steady_clock::now();
  g_ns_per_trip = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count()) /
                  static_cast<double>(trips);
  return {kind::round_trips, done};
}

weft::task<std::uint64_t> task_trips(std::uint64_t trips) {
  std::uint64_t done = 0;
  for (std::uint64_t i = 0; i < trips; ++i) {
    co_await bounce{};
    ++done;
  }
  co_return done;
}

weft::task<std::uint64_t> task_queue_trips(weft::executor& ex, std::uint64_t trips) {
  std::uint64_t done = 0;
  for (std::uint64_t i = 0; i < trips; ++i) {
    co_await weft::resume_on(ex);
    ++done;
  }
  co_return done;
}

std::uint64_t fiber_trips(std::uint64_t trips) {
  std::uint64_t done = 0;
  for (std::uint64_t i = 0; i < trips; ++i) {
    weft::await(bounce{});
    ++done;
  }
  return done;
}

std::uint64_t fiber_queue_trips(weft::executor& ex, std::uint64_t trips) {
  std::uint64_t done = 0;
  for (std::uint64_t i = 0; i < trips; ++i) {
    weft::await(weft::resume_on(ex));
    ++done;
  }
  return done;
}

template <class T>
weft::task<T> join_fiber(weft::fiber_handle<T> h) {
  co_return co_await h;
}

std::uint64_t fib_fiber(std::uint64_t n) {
  if (n < 2) return n;
  auto a = weft::spawn_fiber([n] { return fib_fiber(n - 1); });
  const std::uint64_t b = fib_fiber(n - 2);
  return b + weft::await(a);
}

template <class Fn>
std::uint64_t on_fiber(weft::thread_pool& pool, Fn fn) {
  return weft::sync_wait(pool, join_fiber(weft::spawn_fiber(std::move(fn), {.executor = &pool})));
}

const weft_bench::workload<answer> k_fiber_switch{
    .name = "fiber_switch",
    .size_meaning = "n: fib flavors compute fib(n), switch flavors do n * 100,000 round trips; 1..60",
    .default_size = 30,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 60; },
    .check =
        [](std::uint64_t n, const answer& got) {
          return weft_bench::expect_equal(got.value, got.what == kind::fib ? fib_answer(n) : n * k_trips_per_n);
        },
    .flavors =
        {
            {"task",
             [](int t, std::uint64_t n) {
               auto& pool = weft_bench::weft_pool(t);
               return timed_trips(n * k_trips_per_n,
                                  [&] { return weft::sync_wait(pool, task_trips(n * k_trips_per_n)); });
             }},
            {"fiber",
             [](int t, std::uint64_t n) {
               auto& pool = weft_bench::weft_pool(t);
               return timed_trips(n * k_trips_per_n,
                                  [&] { return on_fiber(pool, [n] { return fiber_trips(n * k_trips_per_n); }); });
             }},
            {"task-queue",
             [](int t, std::uint64_t n) {
               auto& pool = weft_bench::weft_pool(t);
               return timed_trips(n * k_trips_per_n,
                                  [&] { return weft::sync_wait(pool, task_queue_trips(pool, n * k_trips_per_n)); });
             }},
            {"fiber-queue",
             [](int t, std::uint64_t n) {
               auto& pool = weft_bench::weft_pool(t);
               return timed_trips(n * k_trips_per_n, [&] {
                 return on_fiber(pool, [&pool, n] { return fiber_queue_trips(pool, n * k_trips_per_n); });
               });
             }},
            {"fib-fj",
             [](int t, std::uint64_t n) {
               return answer{kind::fib, weft::sync_wait(weft_bench::weft_pool(t), fib_fj(n))};
             }},
            {"fib-fiber",
             [](int t, std::uint64_t n) {
               auto& pool = weft_bench::weft_pool(t);
               return answer{kind::fib, on_fiber(pool, [n] { return fib_fiber(n); })};
             }},
        },
};

}  // namespace

int main(int argc, char** argv) {
  const int rc = weft_bench::run(argc, argv, k_fiber_switch);
  if (rc == 0 && g_ns_per_trip >= 0) std::printf("ns_per_round_trip: %.2f\n", g_ns_per_trip);
  return rc;
}
