// weft/detail/timer.hpp: the process-wide deadline thread under weft::with_deadline
// (weft/timeout.hpp). Not API.
//
// One thread, started on first use, sleeps on a condition variable until the earliest
// deadline, then runs that entry's function (outside its lock). Entries are intrusive
// nodes owned by the waiting coroutine's frame: timer_add links one, timer_remove
// unlinks it, or, when it is firing right now, waits until its function returned; so
// after timer_remove the node may go. Functions only request stops (which run stop
// callbacks: those hand work on, they do not block), so one thread serves every pool.
// A waiter that such a stop wakes, on an executor that refuses work because it shuts
// down, is resumed on the timer thread itself once the function returned
// (detail::refused_wakes), so that its wait still ends; the thread never terminates.
#pragma once

#include <chrono>
#include <cstdint>

namespace weft::detail {

struct timer_entry {
  std::chrono::steady_clock::time_point m_when;
  void (*m_fn)(timer_entry&) noexcept = nullptr;  // runs on the timer thread
  void* m_arg = nullptr;
  std::uint64_t m_seq = 0;  // insertion order among equal deadlines (timer.cpp)
  bool m_fired = false;     // m_fn ran (written before timer_remove returns to the owner)
};

/// Arms `e` (m_when, m_fn, m_arg set). Thread-safe. Throws std::bad_alloc, or
/// std::system_error when the timer thread cannot be started.
void timer_add(timer_entry& e);
/// Disarms `e`: unlinked if it has not fired, else waits until its m_fn returned. Then
/// e.m_fired tells whether it fired. Thread-safe; never called from inside an m_fn.
void timer_remove(timer_entry& e) noexcept;

}  // namespace weft::detail
