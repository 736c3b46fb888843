// weft/detail/timer.hpp: the deadlines under weft::with_deadline (weft/timeout.hpp).
// Not API.
//
// A deadline is an intrusive node (timer_entry) owned by the waiting coroutine's frame,
// armed in one timer_queue: a binary min-heap by deadline, with a mutex, whose firing
// thread runs each due entry's function outside the lock. timer_add arms a node where
// the calling thread fires deadlines itself: an io_pool worker's ring, which checks its
// queue when it polls and bounds its parked wait by the earliest deadline (no thread
// hop, no lock shared between workers); anywhere else, one process-wide timer thread,
// started on first use. That thread also watches the workers' queues: a deadline that
// its worker leaves overdue by more than 5 milliseconds (a task computing without an
// await, which polls its token all the same) is fired by the timer thread instead.
// timer_remove unlinks the node, or, when its function is running right now, waits
// until it returned; so after timer_remove the node may go.
//
// Functions only request stops (which run stop callbacks: those hand work on, they do
// not block). A waiter that such a stop wakes, on an executor that refuses work because
// it shuts down, is resumed by the firing thread itself once the function returned
// (detail::refused_wakes), so that its wait still ends: firing never terminates.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

namespace weft::detail {

class timer_queue;

struct timer_entry {
  std::chrono::steady_clock::time_point m_when;
  void (*m_fn)(timer_entry&) noexcept = nullptr;  // runs on the queue's firing thread
  void* m_arg = nullptr;
  std::atomic<timer_queue*> m_queue{nullptr};  // where it is armed (a queue may hand it on)
  std::size_t m_index = 0;                     // its place in the queue's heap, or k_unlinked
  bool m_fired = false;                        // m_fn ran (written before timer_remove returns to the owner)

  static constexpr std::size_t k_unlinked = static_cast<std::size_t>(-1);
};

/// The deadlines of one firing thread (and the timer thread, for what that one leaves
/// overdue). Thread-safe, but for hand_over: its owner's, once.
class timer_queue {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  timer_queue() = default;
  timer_queue(const timer_queue&) = delete;
  timer_queue& operator=(const timer_queue&) = delete;

  /// Links `e` (m_when, m_fn, m_arg set); true when it is now the earliest. Throws
  /// std::bad_alloc (the heap grows geometrically: amortised, no allocation per call).
  bool add(timer_entry& e);
  /// Unlinks `e`, or waits until its function returned when it is firing (see the file
  /// comment). Never called from inside an entry's function.
  static void remove(timer_entry& e) noexcept;
  /// Runs the function of every entry due at `now`, earliest first (new ones due
  /// meanwhile too); returns the earliest deadline left (time_point::max() when none).
  /// One thread fires a queue at a time: a second caller meanwhile returns at once.
  time_point fire_due(time_point now) noexcept;
  /// The earliest deadline (time_point::max() when none): a snapshot, cheap enough for
  /// a poll loop.
  time_point earliest() const noexcept { return time_point(time_point::duration(m_earliest.load())); }
  /// The owner, ending: moves every entry to the process-wide timer thread, which
  /// fires them from then on (their coroutines may still be resumed elsewhere).
  void hand_over() noexcept;

 private:
  void link(timer_entry& e);             // under m_mutex
  void unlink(timer_entry& e) noexcept;  // under m_mutex; e is in m_heap
  void sift_up(std::size_t i) noexcept;
  void sift_down(std::size_t i) noexcept;
  void place(std::size_t i, timer_entry* e) noexcept {
    m_heap[i] = e;
    e->m_index = i;
  }
  void publish_earliest(std::memory_order order = std::memory_order_relaxed) noexcept;

  std::mutex m_mutex;
  std::condition_variable m_returned;  // the firing entry's function returned
  std::vector<timer_entry*> m_heap;
  timer_entry* m_firing = nullptr;
  bool m_firer = false;     // a thread is inside fire_due
  unsigned m_removers = 0;  // remove() calls waiting on m_returned
  std::atomic<time_point::rep> m_earliest{time_point::max().time_since_epoch().count()};
};

/// Arms `e` (m_when, m_fn, m_arg set) on the calling io_pool worker's queue, else on
/// the timer thread's. Thread-safe. Throws std::bad_alloc, or std::system_error when
/// the timer thread cannot be started.
void timer_add(timer_entry& e);
/// Disarms `e`: unlinked if it has not fired, else waits until its m_fn returned. Then
/// e.m_fired tells whether it fired. Thread-safe; never called from inside an m_fn.
inline void timer_remove(timer_entry& e) noexcept { timer_queue::remove(e); }
/// An io_pool worker's queue, from its first poll to its last: the timer thread fires
/// what it leaves overdue (see the file comment). timer_watch throws std::bad_alloc;
/// timer_unwatch waits while the timer thread fires `q`.
void timer_watch(timer_queue& q);
void timer_unwatch(timer_queue& q) noexcept;

}  // namespace weft::detail
