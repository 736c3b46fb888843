// src/fork_group.cpp: fork_group<void>'s shared state (the protocol is described at
// detail::reap_state in include/weft/fork_group.hpp).
#include <cstdio>
#include <exception>
#include <mutex>

#include "weft/detail/fork.hpp"
#include "weft/fork_group.hpp"

namespace weft::detail {

void reap_child_done(reap_state* st, std::size_t index, std::exception_ptr error) noexcept {
  if (error) {
    std::lock_guard lock(st->m_mutex);
    if (st->m_abandoned) {
      report_detached_exception(error);
    } else if (!st->m_error || index < st->m_error_index) {
      st->m_error = std::move(error);
      st->m_error_index = index;
    }
  }
  // acq_rel: publishes this child's effects to whoever reaches zero; if this call does,
  // it sees the joiner's fields or m_abandoned (written before the group's decrement).
  if (st->m_count.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (st->m_abandoned) {
    delete st;
    return;
  }
  resume_at_home(*st->m_home, st->m_joiner, st->m_prio);
}

bool reap_join_suspend(reap_state* st, std::coroutine_handle<> joiner) noexcept {
  st->m_joiner = joiner;
  executor* here = fiber_safe_executor();
  st->m_home = here != nullptr ? here : &fallback_executor();
  st->m_prio = fiber_safe_prio();
  // acq_rel: publishes the fields above to the last child; when this is the last
  // decrement, acquires every child's effects instead and goes on without suspending.
  return st->m_count.fetch_sub(1, std::memory_order_acq_rel) != 1;
}

void reap_abandon(reap_state* st) noexcept {
  {
    std::lock_guard lock(st->m_mutex);
    st->m_abandoned = true;
    if (st->m_error) report_detached_exception(std::exchange(st->m_error, nullptr));
  }
  if (st->m_count.fetch_sub(1, std::memory_order_acq_rel) == 1) delete st;
}

}  // namespace weft::detail
