// weft/io/detail/waiter.hpp: the suspended task an I/O operation resumes. Not API.
#pragma once

#include <coroutine>

#include "weft/detail/worker_context.hpp"
#include "weft/executor.hpp"
#include "weft/task.hpp"

namespace weft::io::detail {

/// The awaiting coroutine and where it must resume: the executor it awaited from and
/// its priority there. capture() runs in await_suspend, resume() where the operation
/// completed (an I/O thread).
struct waiter {
  std::coroutine_handle<> m_h;
  executor* m_home = nullptr;
  unsigned m_prio = 0;

  void capture(std::coroutine_handle<> h) noexcept {
    m_h = h;
    m_home = weft::current_executor();
    m_prio = weft::current_priority();
  }

  /// Resumes the task inline when the calling thread belongs to the executor it awaited
  /// from (or it awaited from a plain thread), else queues it there at its priority.
  void resume() const noexcept {
    if (m_home == nullptr || m_home == weft::detail::t_executor) {
      weft::detail::t_prio = m_prio;
      m_h.resume();
    } else {
      weft::detail::resume_at_home(*m_home, m_h, m_prio);
    }
  }

  /// As resume(), for a completion that the reaping worker has more completed work to
  /// run after: when an idle worker asked it for work, the task is queued for that
  /// worker to steal instead of run inline (weft::detail::offer_to_thief).
  void resume_or_offer() const noexcept {
    if (m_home == nullptr || !weft::detail::offer_to_thief(m_home, m_prio, m_h)) resume();
  }
};

}  // namespace weft::io::detail
