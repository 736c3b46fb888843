// src/scope.cpp: weft::scope's shared state (the protocol is described at the top of
// include/weft/scope.hpp).
#include <cstdio>
#include <exception>
#include <mutex>

#include "weft/detail/fork.hpp"
#include "weft/scope.hpp"

namespace weft::detail {

void scope_state::child_added() noexcept {
  // relaxed: the enqueue that follows publishes the child, and with it this count.
  m_refs.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(m_mutex);
  ++m_alive;
}

void scope_state::child_not_started() noexcept {
  {
    std::lock_guard lock(m_mutex);
    --m_alive;
  }
  drop_ref();
}

void scope_state::on_done_locked(bool kept, std::exception_ptr& error, bool stopped,
                                 std::coroutine_handle<>& wake) noexcept {
  --m_alive;
  if (stopped) {
    // nothing to report or rethrow
  } else if (!error) {
    if (kept) ++m_unreported;
  } else if (m_owner_gone) {
    // nobody will rethrow it: finish_report hands it to report_detached_exception
  } else if (m_policy == scope_policy::collect) {
    try {
      m_errors.push_back(std::move(error));
    } catch (...) {
      std::fputs("weft::scope: out of memory collecting a child's exception; terminating\n", stderr);
      std::terminate();
    }
  } else if (!m_kept) {
    m_kept = std::move(error);
    if (m_policy == scope_policy::stop_on_error) m_stop_pending = true;
  } else {
    error = nullptr;  // a later exception: dropped (rethrow_first, stop_on_error)
  }
  if (m_waiter && (m_waiting_next || m_alive == 0)) wake = std::exchange(m_waiter, {});
}

void scope_state::finish_report(std::coroutine_handle<> wake, std::exception_ptr orphan) noexcept {
  // Outside the lock: request_stop runs the token's callbacks (I/O cancellations) here.
  if (m_stop_pending.exchange(false, std::memory_order_relaxed)) m_source.request_stop();
  if (orphan) report_detached_exception(std::move(orphan));
  // m_home and m_prio were written under the lock with m_waiter, read after it here.
  if (wake) resume_at_home(*m_home, wake, m_prio);
  drop_ref();
}

bool scope_state::join_ready() noexcept {
  std::lock_guard lock(m_mutex);
  return m_alive == 0;
}

bool scope_state::next_ready() noexcept {
  std::lock_guard lock(m_mutex);
  return m_unreported > 0 || m_kept || m_alive == 0;
}

bool scope_state::suspend(std::coroutine_handle<> h, bool for_next) noexcept {
  executor* here = fiber_safe_executor();
  std::lock_guard lock(m_mutex);
  if (for_next ? (m_unreported > 0 || m_kept || m_alive == 0) : m_alive == 0) return false;
  m_waiter = h;
  m_waiting_next = for_next;
  m_home = here != nullptr ? here : &fallback_executor();
  m_prio = fiber_safe_prio();
  return true;
}

bool scope_state::join_suspend(std::coroutine_handle<> h) noexcept { return suspend(h, false); }
bool scope_state::next_suspend(std::coroutine_handle<> h) noexcept { return suspend(h, true); }

bool scope_state::has_kept() noexcept {
  std::lock_guard lock(m_mutex);
  return m_kept != nullptr;
}

void scope_state::rethrow_kept() {
  std::exception_ptr e;
  {
    std::lock_guard lock(m_mutex);
    e = std::exchange(m_kept, nullptr);
  }
  if (e) std::rethrow_exception(e);
}

scope_state::report scope_state::take_report() noexcept {
  std::lock_guard lock(m_mutex);
  if (m_unreported == 0) return m_alive == 0 ? report::none_left : report::pending;
  --m_unreported;
  return report::taken;
}

std::vector<std::exception_ptr> scope_state::take_errors() {
  std::lock_guard lock(m_mutex);
  return std::exchange(m_errors, {});
}

std::size_t scope_state::alive() noexcept {
  std::lock_guard lock(m_mutex);
  return m_alive;
}

void scope_state::release_owner() noexcept {
  std::size_t alive = 0;
  std::exception_ptr kept;
  std::vector<std::exception_ptr> collected;
  {
    std::lock_guard lock(m_mutex);
    m_owner_gone = true;
    m_waiter = {};  // nobody waits in a scope that is gone
    alive = m_alive;
    kept = std::exchange(m_kept, nullptr);
    collected = std::exchange(m_errors, {});
  }
  if (alive != 0) {
    // A destructor cannot wait: the children hold the state (one reference each), so
    // they may run on; the stop ends them at their next wait.
    std::fprintf(stderr,
                 "weft::scope: destroyed with %zu children still running; they were asked to stop and end "
                 "detached (co_await join() before the scope goes, or use weft::with_scope)\n",
                 alive);
    m_source.request_stop();
  }
  // Never rethrown by a join nor taken: reported, not lost silently.
  if (kept) report_detached_exception(kept);
  for (const auto& e : collected) report_detached_exception(e);
  drop_values();
  drop_ref();
}

void scope_state::drop_ref() noexcept {
  // acq_rel: every child's report happens before the delete by whoever drops the last.
  if (m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace weft::detail
