// io/src/uring_impl.hpp: one io_uring ring with its loop state, shared by the sources of
// io/src (not installed, not API). A uring_context has one, run by its own thread; an
// io_pool has one per worker of its thread_pool, driven by that worker through the
// worker_reactor interface (weft/detail/reactor.hpp).
#pragma once

#include <liburing.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "weft/detail/reactor.hpp"
#include "weft/detail/timer.hpp"
#include "weft/io/uring_context.hpp"

namespace weft::io::detail {

class buffer_pool;

/// user_data of CQEs that carry no operation.
inline constexpr std::uint64_t k_wake_data = 1;    // the eventfd read
inline constexpr std::uint64_t k_ignore_data = 3;  // cancels and other fire-and-forget SQEs
/// user_data bit 0 marks the linked timeout of the operation at (user_data & ~1).
inline constexpr std::uint64_t k_timeout_bit = 1;

class uring_impl final : public weft::detail::worker_reactor {
 public:
  /// `own_thread`: start the loop thread (uring_context); else a pool worker drives the
  /// ring (io_pool: attach() on that worker makes it the ring's only submitter).
  uring_impl(uring_context& owner, const uring_options& options, bool own_thread = true);
  ~uring_impl() override;

  /// The loop of the calling thread, or nullptr off any loop thread.
  static uring_impl* current() noexcept;

  // ---- loop thread only ----------------------------------------------------------------
  /// A free SQE; submits what is queued first when the ring is full. Never null: when
  /// the ring stays full because io_uring_submit keeps failing (1,000 times in a row),
  /// prints why and aborts rather than spin forever.
  io_uring_sqe* sqe();
  /// Prepares op's SQE (and its linked timeout); its CQE resumes it. `count`: set the
  /// completions the task waits for (a new operation); false for an operation that
  /// sends its SQE again from its m_on_cqe (write_all), whose counts stand.
  void prepare(uring_op& op, bool count = true);
  /// Queues a fire-and-forget cancel of everything in flight on socket `id`'s fd `fd`,
  /// unless the last operation this loop started on `fd` was another socket's (the
  /// socket was closed and the number reused): then it does nothing.
  void cancel_socket(int fd, std::uint64_t id);
  /// Records that socket `id` (a stream's, or a listener's) has an operation prepared on
  /// fd `fd` now: what cancel_socket checks.
  void note_socket(int fd, std::uint64_t id) noexcept;
  /// Runs an operation that was handed over from another thread.
  static void start_foreign(void* op);
  /// After `op` was started on this thread and did not end at once: registers its stop
  /// watch, if any (the protocol at stop_watch, weft/io/uring_context.hpp).
  static void watch_begin(uring_op& op);
  /// `op` itself has ended (its final CQE, or its custom completion): unregisters the
  /// watch and drops its count unless the callback fired (then the queued cancel
  /// does). Call before dropping the operation's own count.
  static void watch_end(uring_op& op) noexcept;
  /// The end of a custom operation (accept): watch_end, then its count; resumes the
  /// task when that was the last.
  static void finish_custom(uring_op& op) noexcept;
  /// As finish_custom, but the task is queued to its executor, never resumed inline
  /// (inline only when it awaited from a plain thread, which has no queue).
  static void finish_custom_queued(uring_op& op) noexcept;
  /// Unregisters `w`'s stop callback (waiting for one running on another thread) and
  /// takes it off this ring's list of registered watches.
  void unwatch(stop_watch& w) noexcept;
  void push_ready(std::coroutine_handle<> h, unsigned prio) { m_ready[prio].push_back(h.address()); }

  // ---- any thread --------------------------------------------------------------------------
  // `new_work`: an operation a task starts from another thread; refused with
  // shutdown_error once destruction began (what would finish it is going away).
  // Otherwise (close, cancel) the call is queued and runs if the loop still does, and
  // this never throws. `c` must live until the call ran (see loop_call).
  void post_call(loop_call& c, bool new_work = false);
  void post_ready(std::coroutine_handle<> h, unsigned prio);
  /// Refuses new work, lets the loop finish what is queued, joins its thread. Idempotent.
  void stop();

  // ---- worker_reactor: an io_pool worker drives the ring (weft/detail/reactor.hpp) -------
  void attach(unsigned index) noexcept override;
  void detach() noexcept override;
  bool poll() noexcept override;
  bool pending() const noexcept override;
  void wait() noexcept override;
  void wake() noexcept override;
  weft::detail::timer_queue* deadlines() noexcept override {
    return m_deadlines_watched && !m_draining ? &m_deadlines : nullptr;
  }
  counts operation_counts() const noexcept override {
    counts c;
    c.completed = m_completed.load(std::memory_order_relaxed);  // first: never more than submitted
    c.submitted = m_submitted.load(std::memory_order_relaxed);
    return c;
  }

  /// Loop thread: this ring's receive buffers (weft/io/buffer.hpp), made at the first
  /// receive(); null with `err` set (ENOMEM) when they cannot be had.
  buffer_pool* buffers(int& err) noexcept;

  uring_context& m_owner;
  const unsigned m_priorities;
  /// Unique among the rings of this process, never reused (a buffer_pool tells its own
  /// ring's thread by it).
  const std::uint64_t m_serial;
  bool m_multishot_accept = false;
  bool m_enable_on_loop = false;  // ring created disabled (single issuer): the loop enables it
  /// Loop thread: a closed listener's cancelled accept, whose last CQE must still come
  /// before the loop may end (it frees the listener's state and closes its socket): its
  /// node (the listener's close call, run already) is kept here until then. The loop
  /// waits for them at most k_linger_limit; the ring's destruction releases those left
  /// (m_discard), after the kernel let go of the ring.
  void linger(loop_call& c) noexcept {
    c.m_next = m_lingering;
    m_lingering = &c;
  }
  void unlinger(loop_call& c) noexcept {
    for (loop_call** at = &m_lingering; *at != nullptr; at = &(*at)->m_next) {
      if (*at == &c) {
        *at = c.m_next;
        return;
      }
    }
  }
  bool lingering() const noexcept { return m_lingering != nullptr; }
  static constexpr auto k_linger_limit = std::chrono::seconds(2);
  /// Loop thread: SQEs whose last CQE has not been reaped (the eventfd read not counted);
  /// an io_pool worker enters the kernel for completions only while there are some.
  std::size_t m_inflight = 0;
  /// Loop thread writes (relaxed load and store), any thread reads: SQEs counted in
  /// m_inflight so far, and those whose last CQE was reaped (operation_counts()).
  std::atomic<std::uint64_t> m_submitted{0};
  std::atomic<std::uint64_t> m_completed{0};

 private:
  void loop();
  void arm_wake();
  io_uring_sqe* free_sqe() noexcept;  // sqe() without the count (arm_wake's eventfd read)
  void enable_here();
  void wake_if_sleeping(std::unique_lock<std::mutex>& lock);
  bool run_calls();
  bool run_ready();
  /// Resumes the tasks of every CQE there is. `offer` (an io_pool worker's poll): a
  /// task with more of the batch behind it may go to an idle worker that asked for
  /// work instead (waiter::resume_or_offer).
  unsigned reap(bool offer = false);
  void dispatch(std::uint64_t data, int res, unsigned flags, bool offer);

  /// At destruction: unregisters the callbacks of operations abandoned in flight, whose
  /// tokens may be stopped later (their frames live on; this ring does not).
  void unwatch_all() noexcept;

  io_uring m_ring{};
  // By fd number: the socket identity of the last operation prepared on it (0: none).
  std::vector<std::uint64_t> m_fd_socket;
  int m_eventfd = -1;
  std::uint64_t m_eventfd_value = 0;
  std::vector<std::deque<void*>> m_ready;  // loop thread: one queue per priority
  stop_watch* m_watches = nullptr;         // loop thread: watches with a registered callback

  std::mutex m_mutex;                   // guards the members below
  loop_call* m_calls = nullptr;         // queued calls, oldest first
  loop_call** m_calls_tail = &m_calls;  // where the next one is linked
  std::vector<std::pair<void*, unsigned>> m_foreign_ready;
  bool m_sleeping = false;  // the loop waits in io_uring_enter: wake it through the eventfd
  bool m_stopping = false;
  std::atomic<bool> m_has_calls{false};  // m_calls is not empty (set under m_mutex; read without)

  bool m_draining = false;  // io_pool worker done: only lingering operations are still dispatched
  /// io_pool worker: the deadlines of weft::with_deadline calls made on it (fired by poll,
  /// bounding wait; weft/detail/timer.hpp).
  weft::detail::timer_queue m_deadlines;
  bool m_deadlines_watched = false;  // the timer thread watches m_deadlines (attach to detach)
  /// Runs the deadlines due now; true when any was due.
  bool fire_deadlines() noexcept;

  loop_call* m_lingering = nullptr;  // see linger()
  // The receive buffers: their uring_options, and the pool once made (see buffers()).
  unsigned m_buffer_count;
  unsigned m_buffer_size;
  bool m_provided_buffers;
  buffer_pool* m_buffers = nullptr;
  std::thread m_thread;
};

/// What io/src may touch of a uring_context (its rings).
struct uring_access {
  static std::size_t count(const uring_context& c) noexcept { return c.m_rings.size(); }
  static uring_impl& ring(uring_context& c, std::size_t i) noexcept { return *c.m_rings[i]; }
  /// The calling thread's ring when it is one of `c`'s (its loop, or an io_pool worker's).
  static uring_impl* here(const uring_context& c) noexcept {
    uring_impl* r = uring_impl::current();
    return r != nullptr && &r->m_owner == &c ? r : nullptr;
  }
  /// Where an operation started off `c`'s threads goes: the loop, or (io_pool) the
  /// workers' rings in turn.
  static uring_impl& foreign_ring(uring_context& c) noexcept {
    if (c.m_rings.size() == 1) return *c.m_rings[0];
    return *c.m_rings[c.m_next_ring.fetch_add(1, std::memory_order_relaxed) % c.m_rings.size()];
  }
  /// Starts `op` (uring_awaitable::suspend) on op.m_ring, else the calling worker's ring,
  /// else foreign_ring(): prepared at once when that is this thread's ring (a custom op
  /// may complete right there: then false, and the caller must not suspend), else
  /// handed over as a call (true).
  static bool submit(uring_context& c, uring_op& op);
  /// Runs `call` on ring `r`: now when called on its thread, else queued (the node must
  /// live until it ran). Allocates nothing.
  static void invoke(uring_impl& r, loop_call& call) noexcept;
};

}  // namespace weft::io::detail
