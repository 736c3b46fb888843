// Helpers for tests of channels and sync primitives: bounded waiting (poll a condition
// until it holds or a deadline passes, then the test fails instead of hanging; polling
// yields the CPU, it never sleeps a fixed time as synchronisation), failure counting
// off the test thread (Catch2 assertions are not thread-safe), and a probe that tells
// when a one-worker pool has run everything posted before it.
#pragma once

#include <weft/config.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/task.hpp>

#include <atomic>
#include <chrono>
#include <thread>

namespace weft_test {

/// How long a bounded wait may take before the test fails (sanitizers are slower).
inline constexpr std::chrono::seconds k_wait_limit{WEFT_SANITIZED ? 120 : 30};

/// Polls `pred` until it returns true (-> true) or k_wait_limit passed (-> false).
template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + k_wait_limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::yield();
  }
  return true;
}

/// Failures seen on workers and helper threads; the test body checks the count.
inline std::atomic<int> g_failures{0};
inline void expect(bool ok) noexcept {
  if (!ok) g_failures.fetch_add(1, std::memory_order_relaxed);
}

inline weft::task<void> raise_flag(std::atomic<int>& flag) {
  flag.store(1, std::memory_order_release);
  co_return;
}

/// Posts a probe to a one-worker pool and waits (bounded) until it ran: everything
/// posted before it has run up to its first suspension. False on time-out.
inline bool drain_one_worker_pool(weft::thread_pool& pool) {
  std::atomic<int> ran{0};
  weft::post(pool, raise_flag(ran));
  return eventually([&] { return ran.load(std::memory_order_acquire) == 1; });
}

}  // namespace weft_test
