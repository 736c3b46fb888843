// Test helpers: one-shot gates, live-object counting, and a pool caught in the middle
// of its shutdown. None of them sleeps: waiting is std::atomic::wait (a futex).
#pragma once

#include <weft/config.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/task.hpp>

#include <atomic>
#include <cstddef>
#include <optional>
#include <thread>

namespace weft_test {

/// Repetitions of a stress loop: `plain` in a normal build, `sanitized` under ASan or
/// TSan (5-15x slower), so that each stress test stays within a few seconds.
constexpr int rounds(int plain, int sanitized) noexcept { return WEFT_SANITIZED ? sanitized : plain; }

/// A one-shot gate: wait() returns once open() was called. Thread-safe.
class gate {
 public:
  void open() noexcept {
    m_open.store(true, std::memory_order_release);  // pairs with the acquire in wait()
    m_open.notify_all();
  }
  void wait() const noexcept {
    while (!m_open.load(std::memory_order_acquire)) m_open.wait(false, std::memory_order_acquire);
  }

 private:
  std::atomic<bool> m_open{false};
};

/// Counts its live instances (copies and moves included) in `live`. Thread-safe.
class tracker {
 public:
  explicit tracker(std::atomic<int>& live) noexcept : m_live(&live) { live.fetch_add(1, std::memory_order_relaxed); }
  tracker(const tracker& o) noexcept : m_live(o.m_live) { m_live->fetch_add(1, std::memory_order_relaxed); }
  tracker(tracker&& o) noexcept : tracker(static_cast<const tracker&>(o)) {}
  tracker& operator=(const tracker&) = delete;
  ~tracker() { m_live->fetch_sub(1, std::memory_order_acq_rel); }

 private:
  std::atomic<int>* m_live;
};

/// A task that opens `started`, then holds its worker until `release` opens.
inline weft::task<void> hold_worker(gate& started, const gate& release) {
  started.open();
  release.wait();
  co_return;
}

/// A task that adds one to `n` when it runs (and keeps a tracker in its frame).
inline weft::task<void> count_run(std::atomic<std::size_t>& n, tracker) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

/// A one-worker pool caught while it shuts down: its worker is held by a task, its
/// destructor runs on another thread and already refuses posts from outside. The pool
/// is finished (destroyed) by finish() or the destructor. Not thread-safe.
class pool_in_shutdown {
 public:
  pool_in_shutdown() {
    m_pool.emplace(weft::pool_options{.threads = 1, .priorities = 2});
    m_raw = &*m_pool;
    weft::post(*m_raw, hold_worker(m_started, m_release));
    m_started.wait();
    // Queued behind the held worker before the shutdown begins.
    for (std::size_t i = 0; i < k_queued_before; ++i) probe();
    m_destroyer = std::thread([this] { m_pool.reset(); });
    // Probe until the destructor refuses work; every probe accepted must still run.
    while (probe()) std::this_thread::yield();
  }
  pool_in_shutdown(const pool_in_shutdown&) = delete;
  pool_in_shutdown& operator=(const pool_in_shutdown&) = delete;
  ~pool_in_shutdown() { finish(); }

  static constexpr std::size_t k_queued_before = 100;

  /// The pool, valid until finish().
  weft::thread_pool& pool() noexcept { return *m_raw; }

  /// Lets the held worker go and waits until the pool is destroyed.
  void finish() {
    m_release.open();
    if (m_destroyer.joinable()) m_destroyer.join();
  }

  /// Probes posted before the pool refused them, and how many of them ran.
  std::size_t probes_accepted() const noexcept { return m_probes_accepted; }
  std::size_t probes_ran() const noexcept { return m_probes_ran.load(std::memory_order_acquire); }
  /// Probe frames still alive (0 once finished).
  int probes_alive() const noexcept { return m_live.load(std::memory_order_acquire); }

 private:
  /// Posts one probe; false when the pool refused it with shutdown_error.
  bool probe() {
    try {
      weft::post(*m_raw, count_run(m_probes_ran, tracker{m_live}));
    } catch (const weft::shutdown_error&) {
      return false;
    }
    ++m_probes_accepted;
    return true;
  }

  gate m_started;
  gate m_release;
  std::atomic<std::size_t> m_probes_ran{0};
  std::atomic<int> m_live{0};
  std::size_t m_probes_accepted = 0;
  std::optional<weft::thread_pool> m_pool;
  weft::thread_pool* m_raw = nullptr;
  std::thread m_destroyer;
};

}  // namespace weft_test
