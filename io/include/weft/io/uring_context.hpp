// weft/io/uring_context.hpp: a native io_uring run loop (liburing), one thread, as a
// weft executor. Sockets: weft/io/tcp.hpp; timers: weft/io/sleep.hpp.
//
// Loop protocol (io/src/uring_context.cpp has the details): each turn the loop thread
//   1. takes the calls queued by other threads (operations they start, cancels,
//      closes, tasks they schedule) under one mutex;
//   2. runs up to 64 ready tasks, highest priority first;
//   3. submits every SQE prepared since the last turn and, when no task is ready, waits
//      for one completion: one io_uring_enter per turn, however many operations;
//   4. reaps the completions in a batch and resumes their tasks: inline when the task
//      awaited from this context, else queued on the executor it awaited from.
// Other threads wake a waiting loop through an eventfd the ring keeps a read on.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <vector>

#include "weft/executor.hpp"
#include "weft/io/detail/waiter.hpp"

struct io_uring_sqe;  // liburing's; only a pointer to it is named here

namespace weft::io {

/// Options of a uring_context: `weft::io::uring_context io{{.entries = 1024}};`
/// A plain value (no synchronization); read once by the constructor.
struct uring_options {
  unsigned entries = 2048;  ///< submission queue entries, 8..32768 (the completion queue has twice as many)
  unsigned priorities = 4;  ///< priority levels of its task queue, 1..16; 0 is highest
  /// Kernel features used where the kernel has them; false runs what weft does on a
  /// kernel without them (to compare, or to test those paths on a newer kernel).
  /// single_issuer: a single-issuer ring with deferred task work, enabled by its loop
  /// thread (IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN | R_DISABLED, Linux 6.1).
  bool single_issuer = true;
  /// multishot accept for listeners (Linux 5.19, and only with single_issuer: see
  /// has_multishot_accept()); false: one accept SQE per accept.
  bool multishot_accept = true;
  /// The receive buffers of each ring, for receive() (weft/io/buffer.hpp): buffer_count
  /// buffers (1..32768) of buffer_size bytes (64..16 MiB, at most 4 GiB in all), made at
  /// a ring's first receive(). The memory is reserved then; only the buffers that data
  /// was received into cost memory.
  unsigned buffer_count = 1024;
  unsigned buffer_size = 4096;  ///< see buffer_count
  /// Registers the buffers with the kernel as a provided buffer ring (Linux 5.19): it
  /// picks one when data arrives. false, or on an older kernel: the ring waits for the
  /// socket to be readable, then takes a buffer and receives into it.
  bool provided_buffers = true;
};

/// Thrown by uring_context's constructor when io_uring cannot be used here. code() is
/// the cause from io_uring_setup: ENOSYS (kernel without io_uring), EPERM or EACCES
/// (blocked by seccomp, a container policy or sysctl kernel.io_uring_disabled), ENOMEM
/// (locked-memory limit); what() names it in words. Immutable once thrown: its const
/// members may be read from any thread.
class uring_unavailable : public std::system_error {
 public:
  /// std::system_error's constructors: the cause's error_code and a message.
  using std::system_error::system_error;
};

class uring_context;

namespace detail {

/// What an operation asks the ring to do (prepared on the loop thread).
enum class op_kind : std::uint8_t {
  custom,  // m_start runs on the loop thread instead of preparing an SQE
  recv,
  send,
  read,            // read(2) at the file position (m_buf, m_len): signalfd
  sendmsg,         // m_buf: a msghdr (UDP)
  recvmsg,         // m_buf: a msghdr; MSG_TRUNC: the result is the datagram's whole length
  recv_datagram,   // recv with MSG_TRUNC (a connected UDP socket)
  recvmsg_stream,  // m_buf: a msghdr; a stream socket's scatter read (no MSG_TRUNC)
  connect,
  timeout,   // sleep: m_ts relative, or absolute on CLOCK_MONOTONIC when m_abs
  prepared,  // m_prep fills in the SQE (files: openat, read/write at an offset, fsync, statx, close)
};

/// A call handed to the loop thread (uring_impl::post_call): fn(arg) runs there at the
/// start of the next loop turn. The caller owns the node and keeps it alive until the
/// call ran (it may free it from inside the call); queueing it allocates nothing, so
/// posting never fails for lack of memory.
struct loop_call {
  void (*m_fn)(void*) = nullptr;
  void* m_arg = nullptr;
  // Optional: called with m_arg instead of m_fn when the context is destroyed with the
  // call still queued (the loop had ended), to free a node the call would have freed.
  void (*m_discard)(void*) = nullptr;
  loop_call* m_next = nullptr;  // the queue's link (loop's mutex)
};

struct uring_op;
class uring_impl;

/// Watches a stop token for one ring operation (every uring awaitable has one; the loop
/// runs the protocol, io/src/uring_context.cpp). The token is the awaiting task's
/// (weft/stop.hpp), or the one given to with_cancel. On the loop thread, once the
/// operation is started, a std::stop_callback is registered and counts as one more
/// completion of the operation (uring_op::m_pending); the callback, on whatever thread
/// requests the stop, only queues `m_call` to the loop, where the operation is
/// cancelled (an io_uring cancel, or the op's own m_cancel) and that count dropped.
/// When the operation ends first, the callback is unregistered (which waits for one
/// running elsewhere) and the count is dropped there unless the callback fired. So the
/// task resumes only after a queued cancel has run: never a stale request.
struct stop_watch {
  struct fire {  // the callback: any thread
    stop_watch* m_self;
    void operator()() const noexcept;
  };
  std::stop_token m_token;           // stop_possible() only when watched
  bool m_explicit = false;           // set by with_cancel: not replaced by the task's token
  bool m_main_done = false;          // loop thread: the operation itself has ended
  std::atomic<bool> m_fired{false};  // the callback ran (release, read after unregistering)
  std::optional<std::stop_callback<fire>> m_callback;
  uring_impl* m_ring = nullptr;  // the ring the operation runs on (set when it starts)
  uring_op* m_op = nullptr;
  loop_call m_call;  // the cancel, queued to the loop by the callback
  // m_ring's list of registered watches (its loop thread only): the ring's destruction
  // unregisters those of abandoned operations, so a later stop cannot reach the ring.
  stop_watch* m_prev = nullptr;
  stop_watch* m_next = nullptr;

  stop_watch() = default;
  // Moved only before the operation starts (with_timeout / with_cancel return the
  // awaitable by value): the token and the flag go along, nothing else is set yet.
  stop_watch(stop_watch&& o) noexcept : m_token(std::move(o.m_token)), m_explicit(o.m_explicit) {}
  stop_watch& operator=(stop_watch&&) = delete;
};

/// One operation in flight. Lives in the awaiting coroutine's frame until its task is
/// resumed. Its fields are written by the awaiting thread before submission and by
/// the loop thread afterwards; the submission hand-off orders the two.
struct uring_op {
  op_kind m_kind = op_kind::custom;
  bool m_abs = false;           // timeout: m_ts is absolute
  bool m_link_timeout = false;  // with_timeout: a linked timeout of m_ts follows the SQE
  bool m_timed_out = false;     // the linked timeout fired
  std::uint8_t m_pending = 0;   // completions still to come before the task resumes
  int m_fd = -1;
  std::uint32_t m_len = 0;
  std::uint64_t m_socket = 0;  // recv/send/connect: the stream's socket identity (tcp_stream::cancel)
  void* m_buf = nullptr;
  int m_res = 0;                  // the result: bytes, fd, or -errno
  std::int64_t m_ts[2] = {0, 0};  // seconds, nanoseconds (a __kernel_timespec)
  /// custom: runs on the loop thread; true when the operation completed right there
  /// (m_res set), false when it will complete later through complete().
  bool (*m_start)(uring_op&) = nullptr;
  /// prepared: fills in the SQE from the operation (and its m_arg), on the loop thread.
  void (*m_prep)(::io_uring_sqe* sqe, uring_op& op) = nullptr;
  /// Optional: sees each CQE first; returns false when the operation goes on (resubmitted).
  bool (*m_on_cqe)(uring_op&, int res, unsigned flags) = nullptr;
  void* m_arg = nullptr;  // for m_start / m_on_cqe
  /// Optional, custom ops: cancels the operation on the loop thread if it is still
  /// waiting (then sets m_res and returns true: it has ended); false when it is not.
  bool (*m_cancel)(uring_op&) = nullptr;
  stop_watch* m_watch = nullptr;  // set while a token is watched (see stop_watch)
  /// The ring it must run on (a listener's accept: the listener's ring); null: the
  /// ring of the calling worker (io_pool), else the context's.
  uring_impl* m_ring = nullptr;
  bool m_lingers = false;  // a closed listener's accept: its last CQE still matters at shutdown
  waiter m_waiter;
  loop_call m_call;  // submitted from another thread: the hand-off to the loop
};

struct uring_access;
struct pool_mode {};

}  // namespace detail

/// A weft executor running an io_uring loop on one thread it starts. Tasks scheduled
/// on it run on that thread between completions, highest priority first. Operations
/// (tcp_stream, tcp_listener, sleep_for) may be awaited from any thread: a task on
/// this context starts them directly, a task elsewhere (a thread_pool worker) hands
/// them to the loop; either way the task resumes on the executor it awaited from.
///
/// Destruction: refuses new work from other threads (schedule, and starting an
/// operation from a task elsewhere: shutdown_error from the co_await), runs the tasks
/// already queued, then stops the loop and joins the thread. Operations still in
/// flight are abandoned (their tasks never resume): finish them, and destroy every
/// socket of this context, first (a listener closed from another thread after the
/// loop stopped is released only when the destructor ends). Destroying it from its
/// own thread aborts.
/// weft::io::io_pool (weft/io/io_pool.hpp) is the other kind: a thread_pool whose
/// workers each drive a ring; sockets and timers work the same on both.
/// Thread-safe.
class uring_context : public executor {
 public:
  /// Sets up the ring and starts the loop thread. Throws uring_unavailable when
  /// io_uring cannot be used (see there), std::invalid_argument for bad options,
  /// std::system_error if the thread or the eventfd cannot be made.
  explicit uring_context(uring_options options = {});
  /// Stops the context as the class comment says (queued tasks run, then the loop stops
  /// and its thread is joined); aborts when called on its own thread.
  ~uring_context() override;
  uring_context(const uring_context&) = delete;
  uring_context& operator=(const uring_context&) = delete;

  /// executor::schedule: queues `h` at `prio` to run on the loop thread (from another
  /// thread it wakes the loop). Thread-safe. Throws std::out_of_range for prio >=
  /// priorities(), shutdown_error from another thread once destruction began.
  void schedule(std::coroutine_handle<> h, unsigned prio) override;
  /// uring_options::priorities. Thread-safe.
  unsigned priorities() const noexcept override;
  /// True on this context's loop thread. Thread-safe.
  bool owns_current_thread() const noexcept override;

  /// True when listeners use multishot accept (one SQE, many connections): Linux 6.1 or
  /// newer (multishot accept with deferred task work) and neither
  /// uring_options::single_issuer nor multishot_accept turned off; else one accept per
  /// call. Thread-safe.
  bool has_multishot_accept() const noexcept;
  /// The number of rings: 1, or an io_pool's worker count. Thread-safe.
  std::size_t ring_count() const noexcept { return m_rings.size(); }

 protected:
  /// io_pool's base: `rings` rings, each driven by a worker of the io_pool's
  /// thread_pool (no thread of its own). Throws as the public constructor.
  uring_context(detail::pool_mode, std::size_t rings, uring_options options);

 private:
  friend struct detail::uring_access;                        // io/src
  std::vector<std::unique_ptr<detail::uring_impl>> m_rings;  // [0]: the loop, or worker 0's ring
  std::atomic<std::size_t> m_next_ring{0};                   // io_pool: where other threads' operations go
  bool m_pool_mode = false;
};

namespace detail {

/// The common awaitable of a ring operation: submit on suspend, result on resume. It
/// watches the stop token of the weft task awaiting it (or the one with_cancel gave):
/// a stop ends it with std::errc::operation_canceled. Under a token stopped before it
/// starts it is still submitted and cancelled at once: it completes only if the kernel
/// can finish it without waiting (weft/stop.hpp).
class uring_awaitable {
 public:
  explicit uring_awaitable(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    const std::stop_token* t = weft::detail::awaiting_token(h);
    if (!m_watch.m_explicit && t != nullptr && t->stop_possible()) m_watch.m_token = *t;
    return suspend(h);
  }

 protected:
  friend struct awaitable_access;
  /// Records `h` and submits (io/src/uring_context.cpp); false when the operation ended
  /// already (do not suspend).
  bool suspend(std::coroutine_handle<> h);

  uring_context* m_ctx;
  uring_op m_op;
  stop_watch m_watch;
};

/// What with_timeout and with_cancel (weft/io/tcp.hpp) set on a ring awaitable.
struct awaitable_access {
  /// The operation (with_timeout sets its linked timeout).
  static uring_op& op(uring_awaitable& a) noexcept { return a.m_op; }
  /// with_cancel's token, watched instead of the awaiting task's.
  static void watch(uring_awaitable& a, std::stop_token t) noexcept {
    a.m_watch.m_token = std::move(t);
    a.m_watch.m_explicit = true;
  }
};

}  // namespace detail

}  // namespace weft::io
