// A deadline that fires while the pool of the task it stops shuts down, shared by the
// thread_pool test (tests/unit/timeout_test.cpp) and the io_pool one
// (tests/io/io_pool_timeout_test.cpp).
#pragma once

#include <weft/event.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/timeout.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "bounded_wait.hpp"
#include "sync.hpp"

namespace weft_test {

/// Waits on an event nobody sets under a deadline; records what with_timeout reported
/// (1: timed_out, 2: anything else).
inline weft::task<void> wait_under_deadline(std::chrono::steady_clock::time_point when, std::atomic<int>& entered,
                                            std::atomic<int>& outcome) {
  weft::manual_reset_event never;
  entered.store(1, std::memory_order_release);
  auto r = co_await weft::with_deadline(never.wait(), when);
  outcome.store(r.ec == std::errc::timed_out ? 1 : 2, std::memory_order_release);
}

/// `raw` (one worker) runs a task under a deadline, then a task that holds its worker;
/// `destroy` runs on another thread (it destroys the pool that owns `raw`). The deadline
/// comes while the destructor refuses work and the worker is held: the woken task cannot
/// be handed to the pool, and must end anyway (resumed by the thread that fired the
/// deadline) instead of ending the process. Checks that it reported the timeout.
inline void check_deadline_during_shutdown(weft::thread_pool& raw, const std::function<void()>& destroy) {
  std::atomic<int> entered{0}, outcome{0};
  const auto when = std::chrono::steady_clock::now() + std::chrono::milliseconds(WEFT_SANITIZED ? 1000 : 300);
  weft::post(raw, wait_under_deadline(when, entered, outcome));
  REQUIRE(eventually([&] { return entered.load(std::memory_order_acquire) == 1; }));
  gate started, release;
  weft::post(raw, hold_worker(started, release));
  started.wait();
  std::thread destroyer(destroy);
  // Until the destructor refuses work from outside.
  REQUIRE(eventually([&] {
    try {
      weft::post(raw, []() -> weft::task<void> { co_return; }());
      return false;
    } catch (const weft::shutdown_error&) {
      return true;
    }
  }));
  const bool refused_first = std::chrono::steady_clock::now() < when;
  // Either order of the deadline and the refusal is correct: fired first, the task was
  // queued behind the held worker and runs once it is released.
  std::this_thread::sleep_until(when);
  if (refused_first) {
    // Refused wake-up: the task ends on the firing thread while the worker is held.
    CHECK(eventually([&] { return outcome.load(std::memory_order_acquire) != 0; }));
  } else {
    WARN("the deadline fired before the pool refused work: the refused case was not exercised");
  }
  release.open();
  destroyer.join();
  CHECK(outcome.load() == 1);
}

}  // namespace weft_test
