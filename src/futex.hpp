// src/futex.hpp: the one wrapper of Linux's futex(2) in weft's sources (private
// futexes: the waiters and wakers share one process). Not installed.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace weft::detail {

/// Sleeps while the 32-bit word at `word` holds `expected`, until a futex_wake on it,
/// `timeout` (relative; null: none) or a spurious wake-up: callers re-check in a loop.
inline void futex_wait(const void* word, std::uint32_t expected, const timespec* timeout = nullptr) noexcept {
  ::syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout, nullptr, 0);
}

/// Wakes up to `count` threads sleeping in futex_wait on `word`.
inline void futex_wake(const void* word, int count) noexcept {
  ::syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

/// futex_wait on an atomic word.
inline void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free);
  futex_wait(static_cast<const void*>(&word), expected);
}

/// Wakes one thread sleeping in futex_wait on an atomic word.
inline void futex_wake_one(std::atomic<std::uint32_t>& word) noexcept {
  futex_wake(static_cast<const void*>(&word), 1);
}

}  // namespace weft::detail
