// weft/detail/spin_lock.hpp: the short lock that guards a channel's or a sync
// primitive's state. Not API.
//
// Every critical section it guards is a few loads and stores (no allocation on the
// common path, no user code, no wake-up), so a waiter spins briefly with `pause`, then
// yields its CPU so that a preempted holder can finish. Unlocking is a plain release
// store: one locked instruction per lock/unlock pair.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "weft/config.hpp"

namespace weft::detail {

/// One CPU relax hint inside a spin loop.
WEFT_INLINE void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Test-and-test-and-set lock; BasicLockable. Thread-safe.
class spin_lock {
 public:
  WEFT_INLINE void lock() noexcept {
    // acquire: pairs with the release store in unlock().
    if (!m_locked.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_slow();
  }
  bool try_lock() noexcept {
    return !m_locked.load(std::memory_order_relaxed) && !m_locked.exchange(true, std::memory_order_acquire);
  }
  WEFT_INLINE void unlock() noexcept { m_locked.store(false, std::memory_order_release); }

 private:
  WEFT_NOINLINE void lock_slow() noexcept {
    for (unsigned spins = 0;;) {
      while (m_locked.load(std::memory_order_relaxed)) {
        if (++spins < k_spins)
          cpu_relax();
        else
          std::this_thread::yield();  // the holder may be preempted: let it run
      }
      if (!m_locked.exchange(true, std::memory_order_acquire)) return;
    }
  }

  static constexpr unsigned k_spins = 128;
  std::atomic<bool> m_locked{false};
};

}  // namespace weft::detail
