// weft/io/asio_executor.hpp: one asio::io_context, run by one thread, as a weft executor.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include "weft/executor.hpp"

namespace weft::io {

/// Options of an asio_executor: `weft::io::asio_executor io{{.priorities = 2}};`
/// A plain value (no synchronization); read once by the constructor.
struct asio_options {
  unsigned priorities = 4;  ///< priority levels of its task queue, 1..16; 0 is highest
};

/// A weft executor over one asio::io_context, run by one thread that the executor
/// starts. Tasks scheduled on it (weft::post, resume_on, sync_wait, spawn().run_on)
/// run on that thread, between Asio's completion handlers, highest priority first
/// among its own queued tasks (up to 64 of them per turn, then Asio's handlers run).
/// Asio I/O objects built on context() complete on the same thread, so a task on this
/// executor that awaits them with weft::io::use_task is resumed inline, with no post.
///
/// Destruction: refuses new work from other threads (shutdown_error), runs every task
/// already queued (and what they queue here), then stops the io_context and joins the
/// thread. Tasks still suspended on I/O at that point are never resumed: finish them
/// first. Destroying the executor from its own thread aborts with a message.
/// Thread-safe.
class asio_executor final : public executor {
 public:
  /// Owns a fresh io_context and starts its thread. Throws std::invalid_argument for
  /// priorities outside 1..16, std::system_error if the thread cannot start.
  explicit asio_executor(asio_options options = {});
  /// Wraps `context` (which must outlive this executor, and which nobody else may run
  /// while this executor lives) and starts the thread that runs it. Same errors.
  explicit asio_executor(asio::io_context& context, asio_options options = {});
  /// Stops the executor as the class comment says (queued tasks run, then the io_context
  /// is stopped and the thread joined); aborts when called on its own thread.
  ~asio_executor() override;
  asio_executor(const asio_executor&) = delete;
  asio_executor& operator=(const asio_executor&) = delete;

  /// The io_context to build sockets, acceptors, timers and resolvers on. Thread-safe.
  asio::io_context& context() noexcept { return *m_context; }
  /// Its Asio executor (Asio I/O objects take it as their executor). Thread-safe.
  asio::io_context::executor_type get_executor() noexcept { return m_context->get_executor(); }

  /// executor::schedule: queues `h` at `prio` to run on the I/O thread. Thread-safe.
  /// Throws std::out_of_range for prio >= priorities(), shutdown_error from another
  /// thread once destruction began.
  void schedule(std::coroutine_handle<> h, unsigned prio) override;
  /// asio_options::priorities. Thread-safe.
  unsigned priorities() const noexcept override { return m_priorities; }
  /// True on this executor's I/O thread. Thread-safe.
  bool owns_current_thread() const noexcept override;

 private:
  void start();
  void drain();       // on the I/O thread: run queued tasks
  void post_drain();  // queue a drain() in the io_context (a no-op once this is destroyed)

  std::unique_ptr<asio::io_context> m_owned;
  asio::io_context* m_context;
  asio::executor_work_guard<asio::io_context::executor_type> m_guard;
  unsigned m_priorities;
  std::mutex m_mutex;                       // guards m_queues, m_drain_posted, m_stopping
  std::vector<std::deque<void*>> m_queues;  // one per priority: coroutine frame addresses
  bool m_drain_posted = false;              // a drain() is queued in the io_context
  bool m_stopping = false;
  // Expires when the destructor is done: a drain() still queued in a context the user
  // owns (and may run again) then does nothing instead of touching a dead executor.
  std::shared_ptr<void> m_life = std::make_shared<char>();
  std::thread m_thread;
};

}  // namespace weft::io
