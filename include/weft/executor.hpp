// weft/executor.hpp: what every weft executor provides, and where the caller runs now.
#pragma once

#include <coroutine>
#include <stdexcept>

#include "weft/config.hpp"

namespace weft {

/// Thrown by post/schedule into an executor that is shutting down (from a thread that
/// is not one of its own workers).
/// Immutable once thrown: its const members may be read from any thread.
class shutdown_error : public std::runtime_error {
 public:
  /// std::runtime_error's constructors: the message what() returns.
  using std::runtime_error::runtime_error;
};

/// An executor runs coroutines on its threads. thread_pool is one; the I/O layer adds
/// others. Implementations are thread-safe.
class executor {
 public:
  /// What destruction does with queued work is up to each implementation.
  virtual ~executor() = default;

  /// Queues `h` to be resumed on one of this executor's threads at priority `prio`
  /// (0 is highest). Thread-safe. Throws std::out_of_range for a priority >=
  /// priorities(), shutdown_error after shutdown began (from a foreign thread).
  virtual void schedule(std::coroutine_handle<> h, unsigned prio) = 0;

  /// Number of priority levels, 1..16. Thread-safe.
  virtual unsigned priorities() const noexcept = 0;

  /// True when the calling thread is one of this executor's threads. Thread-safe.
  virtual bool owns_current_thread() const noexcept = 0;

  /// Called on a worker thread that is about to block (weft::sync_wait): publish any
  /// work only this thread could otherwise run. Default: nothing to do.
  virtual void before_blocking() noexcept {}
};

namespace detail {
struct worker_context;
extern constinit thread_local worker_context* t_worker;  // null outside pool workers
extern constinit thread_local executor* t_executor;      // null outside any executor
extern constinit thread_local unsigned t_prio;           // priority of the running work

// The thread-locals above as read by inline code that can run on a fiber's stack (plain
// functions run by weft::spawn_fiber), which may resume on another thread: where the
// compiler may reuse a thread-local's address computed before the switch
// (WEFT_TLS_VIA_CALLS, weft/config.hpp), these reads are out-of-line calls
// (src/fiber.cpp); elsewhere plain reads.
executor* read_t_executor() noexcept;
worker_context* read_t_worker() noexcept;
unsigned read_t_prio() noexcept;
WEFT_INLINE executor* fiber_safe_executor() noexcept {
  if constexpr (WEFT_TLS_VIA_CALLS)
    return read_t_executor();
  else
    return t_executor;
}
WEFT_INLINE worker_context* fiber_safe_worker() noexcept {
  if constexpr (WEFT_TLS_VIA_CALLS)
    return read_t_worker();
  else
    return t_worker;
}
WEFT_INLINE unsigned fiber_safe_prio() noexcept {
  if constexpr (WEFT_TLS_VIA_CALLS)
    return read_t_prio();
  else
    return t_prio;
}
}  // namespace detail

/// The executor whose thread is running the caller, or nullptr on a plain thread.
/// Reads the calling thread's own state (also right on a fiber): thread-safe.
inline executor* current_executor() noexcept { return detail::fiber_safe_executor(); }

/// The priority the running task was scheduled at (0 outside any executor). Reads the
/// calling thread's own state: thread-safe.
inline unsigned current_priority() noexcept { return detail::fiber_safe_prio(); }

/// Throws std::out_of_range naming `what` unless prio < ex.priorities(). Thread-safe.
void check_priority(const executor& ex, unsigned prio, const char* what);

}  // namespace weft
