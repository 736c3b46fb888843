// Bounded waiting for tests of channels and sync primitives: poll a condition until it
// holds or a deadline passes (then the test fails instead of hanging). Polling yields
// the CPU; it never sleeps a fixed time as a way to synchronise.
#pragma once

#include <weft/config.hpp>

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

}  // namespace weft_test
