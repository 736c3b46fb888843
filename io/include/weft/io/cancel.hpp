// weft/io/cancel.hpp: weft::io::cancel_source, cancellation requested from any thread.
#pragma once

#include <memory>
#include <mutex>

namespace weft::io {

namespace detail {

/// An operation listening to a cancel_source. m_fn runs under the source's lock, on the
/// thread that requested cancellation; it must only hand the request on (post it to the
/// operation's I/O thread), never complete the operation itself.
struct cancel_registration {
  void (*m_fn)(cancel_registration*) noexcept = nullptr;
  void* m_owner = nullptr;  // the operation object m_fn acts on
  cancel_registration* m_prev = nullptr;
  cancel_registration* m_next = nullptr;
  bool m_linked = false;
  bool m_fired = false;  // m_fn was called (guarded by the source's lock)
};

struct cancel_state {
  std::mutex m_mutex;
  bool m_cancelled = false;
  cancel_registration* m_head = nullptr;
};

}  // namespace detail

/// A cancellation request shared by any number of operations (with_cancel). Once
/// request_cancel() was called, every operation listening ends with
/// weft::io::error::cancelled (== std::errc::operation_canceled, over either backend),
/// and so does every operation started with it later. Copies share the same state. Thread-safe.
class cancel_source {
 public:
  /// A fresh source, not cancelled. Throws std::bad_alloc.
  cancel_source() : m_state(std::make_shared<detail::cancel_state>()) {}

  /// Requests cancellation; idempotent. Thread-safe, never blocks on I/O.
  void request_cancel() noexcept {
    std::lock_guard lock(m_state->m_mutex);
    if (m_state->m_cancelled) return;
    m_state->m_cancelled = true;
    for (auto* r = m_state->m_head; r != nullptr;) {
      auto* next = r->m_next;
      r->m_linked = false;
      r->m_fired = true;
      r->m_fn(r);
      r = next;
    }
    m_state->m_head = nullptr;
  }

  /// True once request_cancel() was called. Thread-safe.
  bool cancel_requested() const noexcept {
    std::lock_guard lock(m_state->m_mutex);
    return m_state->m_cancelled;
  }

  /// Not API: listens with `r`; false (and `r` not linked) when already cancelled.
  bool add(detail::cancel_registration& r) noexcept {
    std::lock_guard lock(m_state->m_mutex);
    if (m_state->m_cancelled) return false;
    r.m_linked = true;
    r.m_prev = nullptr;
    r.m_next = m_state->m_head;
    if (r.m_next != nullptr) r.m_next->m_prev = &r;
    m_state->m_head = &r;
    return true;
  }

  /// Not API: stops listening with `r`; true when its m_fn was called (or is running).
  bool remove(detail::cancel_registration& r) noexcept {
    std::lock_guard lock(m_state->m_mutex);
    if (r.m_linked) {
      if (r.m_prev != nullptr) r.m_prev->m_next = r.m_next;
      else m_state->m_head = r.m_next;
      if (r.m_next != nullptr) r.m_next->m_prev = r.m_prev;
      r.m_linked = false;
    }
    return r.m_fired;
  }

 private:
  std::shared_ptr<detail::cancel_state> m_state;
};

}  // namespace weft::io
