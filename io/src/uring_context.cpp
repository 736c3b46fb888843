// io/src/uring_context.cpp: the io_uring run loop.
//
// One thread owns the ring. Everything that touches the submission queue runs on it:
// operations awaited by tasks of this context are prepared directly in their
// await_suspend; operations awaited from other threads, cancels and closes are queued
// as calls (m_calls, under m_mutex: an intrusive list of nodes the callers own, so a
// close or a cancellation never needs memory) and run at the start of the next turn.
//
// A turn: take the queued calls and foreign-scheduled tasks -> run them -> run up to
// k_budget ready tasks -> io_uring_submit_and_wait (one io_uring_enter: submits every
// SQE prepared since the previous turn, and waits for a completion only when nothing is
// ready) -> reap all CQEs in batches, resuming their tasks.
//
// Sleeping and waking: before a waiting enter the loop sets m_sleeping under m_mutex,
// having seen no queued call; a producer that queues under the same mutex and sees
// m_sleeping clears it and writes the eventfd, whose read is always armed in the ring.
// So a call queued before the check is run this turn, one queued after it wakes the
// enter. Stale wake-ups only cost an empty turn.
#include "buffer_pool.hpp"
#include "uring_impl.hpp"

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

namespace weft::io {
namespace detail {
namespace {

constexpr int k_budget = 64;  // ready tasks per turn before completions get a look
constexpr unsigned k_reap_batch = 256;
constexpr unsigned k_offer_behind = 16;  // see reap()
constexpr int k_submit_tries = 1000;     // failed submissions with a full ring before free_sqe gives up

constinit thread_local uring_impl* t_loop = nullptr;
std::atomic<std::uint64_t> g_ring_serial{0};

static_assert(sizeof(__kernel_timespec) == sizeof(std::int64_t[2]));

std::string unavailable_reason(int err) {
  std::string why = "weft::io::uring_context: io_uring is unavailable: io_uring_setup failed with ";
  why += std::strerror(err);
  switch (err) {
    case ENOSYS:
      why += " (ENOSYS: this kernel has no io_uring support)";
      break;
    case EPERM:
      why +=
          " (EPERM: io_uring is blocked here, by a seccomp filter, a container policy or sysctl "
          "kernel.io_uring_disabled)";
      break;
    case EACCES:
      why += " (EACCES: io_uring is restricted to a group by sysctl kernel.io_uring_group)";
      break;
    case ENOMEM:
      why += " (ENOMEM: the locked-memory limit RLIMIT_MEMLOCK is too low for the ring)";
      break;
    default:
      break;
  }
  return why;
}

bool kernel_at_least(int major, int minor) {
  utsname u{};
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

unsigned checked_priorities(unsigned p) {
  if (p < 1 || p > 16)
    throw std::invalid_argument("weft::io::uring_context: priorities must be 1..16 (got " + std::to_string(p) + ")");
  return p;
}

}  // namespace

uring_impl::uring_impl(uring_context& owner, const uring_options& options, bool own_thread)
    : m_owner(owner),
      m_priorities(checked_priorities(options.priorities)),
      m_serial(g_ring_serial.fetch_add(1, std::memory_order_relaxed) + 1),
      m_ready(m_priorities),
      m_buffer_count(options.buffer_count),
      m_buffer_size(options.buffer_size),
      m_provided_buffers(options.provided_buffers) {
  if (options.entries < 8 || options.entries > 32768)
    throw std::invalid_argument("weft::io::uring_context: entries must be 8..32768 (got " +
                                std::to_string(options.entries) + ")");
  if (options.buffer_count < 1 || options.buffer_count > 32768)
    throw std::invalid_argument("weft::io::uring_context: buffer_count must be 1..32768 (got " +
                                std::to_string(options.buffer_count) + ")");
  if (options.buffer_size < 64 || options.buffer_size > (1U << 24) ||
      std::uint64_t{options.buffer_count} * options.buffer_size > (std::uint64_t{1} << 32))
    throw std::invalid_argument(
        "weft::io::uring_context: buffer_size must be 64..16777216 and buffer_count * "
        "buffer_size at most 4 GiB (got " +
        std::to_string(options.buffer_count) + " x " + std::to_string(options.buffer_size) + ")");
  io_uring_params params{};
  // Only the loop thread ever submits (everything else is queued to it as a call), so
  // the ring can be single-issuer with deferred task work: completions are processed
  // when the loop enters the kernel to wait, not by interrupting it (Linux 6.1+). The
  // ring starts disabled and the loop thread enables it, which makes it the issuer.
  // uring_options::single_issuer off starts where a kernel before 6.1 ends up.
  params.flags = IORING_SETUP_CQSIZE;
  if (options.single_issuer)
    params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
  params.cq_entries = options.entries * 2;
  int r = io_uring_queue_init_params(options.entries, &m_ring, &params);
  if (r == -EINVAL && options.single_issuer) {  // before Linux 6.1: no single-issuer / deferred task work
    params = {};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = options.entries * 2;
    r = io_uring_queue_init_params(options.entries, &m_ring, &params);
  }
  if (r == -EINVAL) {  // an old kernel without IORING_SETUP_CQSIZE
    params = {};
    r = io_uring_queue_init_params(options.entries, &m_ring, &params);
  }
  m_enable_on_loop = r == 0 && (params.flags & IORING_SETUP_R_DISABLED) != 0;
  if (r < 0) throw uring_unavailable(std::error_code(-r, std::system_category()), unavailable_reason(-r));
  // Multishot accept (5.19) only with deferred task work (6.1): then the kernel accepts
  // only while the loop waits in io_uring_enter, and a listener's cancel, submitted at
  // the next enter, stops it before it accepts again; that is what bounds what a
  // listener takes ahead of accept() calls (io/src/tcp.cpp).
  m_multishot_accept = options.multishot_accept && m_enable_on_loop && kernel_at_least(5, 19);
  m_eventfd = ::eventfd(0, EFD_CLOEXEC);
  if (m_eventfd < 0) {
    const int err = errno;
    io_uring_queue_exit(&m_ring);
    throw std::system_error(err, std::system_category(), "weft::io::uring_context: eventfd");
  }
  if (!own_thread) return;  // an io_pool worker attaches
  try {
    m_thread = std::thread([this] { loop(); });
  } catch (...) {
    ::close(m_eventfd);
    io_uring_queue_exit(&m_ring);
    throw;
  }
}

uring_impl::~uring_impl() {
  // The loop has ended (its thread joined, or the io_pool's workers): what is still
  // watched belongs to abandoned operations. Unregistered first, since a callback running
  // now on another thread posts its cancel here, under m_mutex.
  unwatch_all();
  // A thread that queued the last call or task may still be inside post_call or
  // post_ready (it wakes the loop under the lock): wait until it is out.
  {
    std::lock_guard lock(m_mutex);
  }
  // Calls queued after the loop's last turn never run; let their owners free them.
  for (loop_call* c = m_calls; c != nullptr;) {
    loop_call* const next = c->m_next;
    if (c->m_discard != nullptr) c->m_discard(c->m_arg);
    c = next;
  }
  ::close(m_eventfd);
  if (m_buffers != nullptr) m_buffers->orphan(m_ring);  // leases still out free it later
  io_uring_queue_exit(&m_ring);
  // Closed listeners whose cancelled accept never reported its end within the loop's
  // bound: the kernel has let go of the ring now, so their state and socket can go.
  while (loop_call* const c = m_lingering) {
    m_lingering = c->m_next;
    std::fprintf(stderr,
                 "weft::io: a closed listener's cancelled accept had not ended when its ring stopped; its socket "
                 "is closed with the ring\n");
    c->m_discard(c->m_arg);
  }
}

uring_impl* uring_impl::current() noexcept { return t_loop; }

io_uring_sqe* uring_impl::free_sqe() noexcept {
  io_uring_sqe* s = io_uring_get_sqe(&m_ring);
  for (int failures = 0; s == nullptr;) {
    // Full: hand what we have to the kernel, then retry. A submission that keeps failing
    // (the kernel refuses io_uring_enter) would never free a slot: give up, loudly.
    const int r = io_uring_submit(&m_ring);
    if (r < 0 && ++failures >= k_submit_tries) {
      std::fprintf(stderr,
                   "weft::io::uring_context: the submission queue is full and io_uring_submit failed %d times "
                   "(last: %s): aborting\n",
                   failures, std::strerror(-r));
      std::abort();
    }
    if (r < 0) std::this_thread::yield();
    s = io_uring_get_sqe(&m_ring);
  }
  return s;
}

io_uring_sqe* uring_impl::sqe() {
  io_uring_sqe* s = free_sqe();
  ++m_inflight;  // every SQE but the eventfd read (arm_wake) ends with one last CQE
  m_submitted.store(m_submitted.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return s;
}

void uring_impl::prepare(uring_op& op, bool count) {
  // An operation and its linked timeout must go in one submission: make room for both.
  if (op.m_link_timeout && io_uring_sq_space_left(&m_ring) < 2) io_uring_submit(&m_ring);
  io_uring_sqe* s = sqe();
  switch (op.m_kind) {
    case op_kind::recv:
      io_uring_prep_recv(s, op.m_fd, op.m_buf, op.m_len, 0);
      break;
    case op_kind::send:
      io_uring_prep_send(s, op.m_fd, op.m_buf, op.m_len, MSG_NOSIGNAL);
      break;
    case op_kind::read:
      io_uring_prep_read(s, op.m_fd, op.m_buf, op.m_len, static_cast<__u64>(-1));
      break;
    case op_kind::sendmsg:
      io_uring_prep_sendmsg(s, op.m_fd, static_cast<const msghdr*>(op.m_buf), MSG_NOSIGNAL);
      break;
    case op_kind::recvmsg:
      io_uring_prep_recvmsg(s, op.m_fd, static_cast<msghdr*>(op.m_buf), MSG_TRUNC);
      break;
    case op_kind::recvmsg_stream:
      io_uring_prep_recvmsg(s, op.m_fd, static_cast<msghdr*>(op.m_buf), 0);
      break;
    case op_kind::recv_datagram:
      io_uring_prep_recv(s, op.m_fd, op.m_buf, op.m_len, MSG_TRUNC);
      break;
    case op_kind::connect:
      io_uring_prep_connect(s, op.m_fd, static_cast<const sockaddr*>(op.m_buf), op.m_len);
      break;
    case op_kind::timeout:
      io_uring_prep_timeout(s, reinterpret_cast<__kernel_timespec*>(op.m_ts), 0, op.m_abs ? IORING_TIMEOUT_ABS : 0);
      break;
    case op_kind::prepared:
      op.m_prep(s, op);
      break;
    case op_kind::custom:
      std::abort();  // started through m_start, never prepared
  }
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uintptr_t>(&op));
  if (op.m_socket != 0) note_socket(op.m_fd, op.m_socket);
  if (count) op.m_pending = 1;
  if (op.m_link_timeout) {
    s->flags |= IOSQE_IO_LINK;
    io_uring_sqe* t = sqe();
    io_uring_prep_link_timeout(t, reinterpret_cast<__kernel_timespec*>(op.m_ts), 0);
    io_uring_sqe_set_data64(t, reinterpret_cast<std::uintptr_t>(&op) | k_timeout_bit);
    if (count) op.m_pending = 2;
  }
}

void uring_impl::note_socket(int fd, std::uint64_t id) noexcept {
  const auto at = static_cast<std::size_t>(fd);
  if (at >= m_fd_socket.size()) [[unlikely]] {
    try {
      m_fd_socket.resize(std::max<std::size_t>(at + 1, 2 * m_fd_socket.size()));
    } catch (const std::bad_alloc&) {
      return;  // unrecorded: a cancel of this fd then goes ahead (see cancel_socket)
    }
  }
  m_fd_socket[at] = id;
}

void uring_impl::cancel_socket(int fd, std::uint64_t id) {
  // An operation is recorded here when it is prepared, and SQEs run in order, so if the
  // fd's last recorded socket is not `id`, what is in flight on it is another socket's.
  // Not recorded at all (no operation yet, or no memory to record it): nothing of
  // another socket was started here on this fd since, or it could not be told apart.
  const auto at = static_cast<std::size_t>(fd);
  if (at < m_fd_socket.size() && m_fd_socket[at] != 0 && m_fd_socket[at] != id) return;
  io_uring_sqe* s = sqe();
  io_uring_prep_cancel_fd(s, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(s, k_ignore_data);
}

void uring_impl::start_foreign(void* p) {
  auto& op = *static_cast<uring_op*>(p);
  if (op.m_kind == op_kind::custom) {
    if (op.m_start(op)) {
      op.m_waiter.resume();
      return;
    }
  } else {
    t_loop->prepare(op);
  }
  watch_begin(op);
}

// ---- stop watches (the protocol: stop_watch in weft/io/uring_context.hpp) ---------------

namespace {
void cancel_watched(void* p) {  // loop thread: the queued call of a fired watch
  auto& w = *static_cast<stop_watch*>(p);
  uring_op& op = *w.m_op;
  if (!w.m_main_done) {
    if (op.m_kind == op_kind::custom) {
      if (op.m_cancel != nullptr && op.m_cancel(op)) {  // it ended here, with m_res set
        w.m_main_done = true;
        w.m_ring->unwatch(w);  // it ran already: nothing to wait for
        --op.m_pending;        // the operation's own count
      }
    } else {
      io_uring_sqe* s = uring_impl::current()->sqe();
      io_uring_prep_cancel64(s, reinterpret_cast<std::uintptr_t>(&op), 0);
      io_uring_sqe_set_data64(s, k_ignore_data);
    }
  }
  if (--op.m_pending == 0) op.m_waiter.resume();  // the watch's count
}
}  // namespace

void stop_watch::fire::operator()() const noexcept {
  stop_watch& w = *m_self;
  // release: whoever unregisters afterwards and reads m_fired also sees m_call set.
  w.m_call.m_fn = &cancel_watched;
  w.m_call.m_arg = &w;
  w.m_fired.store(true, std::memory_order_release);
  w.m_ring->post_call(w.m_call);  // always queued, also when run inline by watch_begin
}

void uring_impl::watch_begin(uring_op& op) {
  stop_watch* w = op.m_watch;
  if (w == nullptr) return;
  ++op.m_pending;      // the registration's count
  w->m_ring = t_loop;  // where the operation runs: its cancel must run there too
  w->m_prev = nullptr;
  w->m_next = t_loop->m_watches;
  if (w->m_next != nullptr) w->m_next->m_prev = w;
  t_loop->m_watches = w;
  w->m_callback.emplace(w->m_token, stop_watch::fire{w});  // fires at once when stopped meanwhile
}

void uring_impl::unwatch(stop_watch& w) noexcept {
  w.m_callback.reset();  // waits for a callback running on another thread
  if (w.m_prev != nullptr) {
    w.m_prev->m_next = w.m_next;
  } else if (m_watches == &w) {
    m_watches = w.m_next;
  }
  if (w.m_next != nullptr) w.m_next->m_prev = w.m_prev;
  w.m_prev = w.m_next = nullptr;
}

void uring_impl::unwatch_all() noexcept {
  while (m_watches != nullptr) unwatch(*m_watches);
}

void uring_impl::watch_end(uring_op& op) noexcept {
  stop_watch* w = op.m_watch;
  if (w == nullptr || w->m_main_done) return;
  w->m_main_done = true;
  w->m_ring->unwatch(*w);  // waits for a callback running on another thread
  // acquire: pairs with fire's release. Fired: its queued cancel drops the count.
  if (!w->m_fired.load(std::memory_order_acquire)) --op.m_pending;
}

void uring_impl::finish_custom(uring_op& op) noexcept {
  watch_end(op);
  if (--op.m_pending == 0) op.m_waiter.resume();
}

void uring_impl::finish_custom_queued(uring_op& op) noexcept {
  watch_end(op);
  if (--op.m_pending != 0) return;
  const waiter& w = op.m_waiter;
  if (w.m_home == nullptr)
    w.resume();
  else
    weft::detail::resume_at_home(*w.m_home, w.m_h, w.m_prio);
}

void uring_impl::wake_if_sleeping(std::unique_lock<std::mutex>& lock) {
  if (!m_sleeping) return;
  m_sleeping = false;
  // Written under the lock: the task this call queued may run, and its owner destroy the
  // context, as soon as the loop wakes; the destructor takes the lock before it closes
  // the eventfd, so no write can come after the close.
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(m_eventfd, &one, sizeof one);  // cannot fail short of EAGAIN at 2^64-2
  lock.unlock();
}

void uring_impl::post_call(loop_call& c, bool new_work) {
  std::unique_lock lock(m_mutex);
  if (new_work && m_stopping) throw shutdown_error("weft::io::uring_context: shutting down, no new operation accepted");
  c.m_next = nullptr;
  *m_calls_tail = &c;
  m_calls_tail = &c.m_next;
  m_has_calls.store(true, std::memory_order_release);
  wake_if_sleeping(lock);
}

void uring_impl::post_ready(std::coroutine_handle<> h, unsigned prio) {
  std::unique_lock lock(m_mutex);
  if (m_stopping) throw shutdown_error("weft::io::uring_context: shutting down, no new work accepted");
  m_foreign_ready.emplace_back(h.address(), prio);
  wake_if_sleeping(lock);
}

void uring_impl::stop() {
  {
    std::unique_lock lock(m_mutex);
    m_stopping = true;
    wake_if_sleeping(lock);
  }
  if (m_thread.joinable()) m_thread.join();  // idempotent (the tests end a loop early)
}

void uring_impl::arm_wake() {
  io_uring_sqe* s = free_sqe();
  io_uring_prep_read(s, m_eventfd, &m_eventfd_value, sizeof m_eventfd_value, 0);
  io_uring_sqe_set_data64(s, k_wake_data);
}

bool uring_impl::run_ready() {
  for (int budget = k_budget; budget > 0; --budget) {
    unsigned prio = 0;
    while (prio < m_priorities && m_ready[prio].empty()) ++prio;
    if (prio == m_priorities) return false;
    void* item = m_ready[prio].front();
    m_ready[prio].pop_front();
    weft::detail::t_prio = prio;
    std::coroutine_handle<>::from_address(item).resume();
  }
  for (const auto& q : m_ready)
    if (!q.empty()) return true;
  return false;
}

void uring_impl::dispatch(std::uint64_t data, int res, unsigned flags, bool offer) {
  if (data == k_wake_data) {
    arm_wake();
    return;
  }
  if (data == k_ignore_data) return;
  auto* op = reinterpret_cast<uring_op*>(data & ~k_timeout_bit);
  if (m_draining && !op->m_lingers) return;  // its task is abandoned (io_pool stopped)
  if ((data & k_timeout_bit) != 0) {
    if (res == -ETIME) op->m_timed_out = true;
  } else {
    if (op->m_on_cqe != nullptr && !op->m_on_cqe(*op, res, flags)) return;
    op->m_res = res;
    watch_end(*op);
  }
  if (--op->m_pending == 0) {
    if (offer)
      op->m_waiter.resume_or_offer();
    else
      op->m_waiter.resume();
  }
}

unsigned uring_impl::reap(bool offer) {
  struct completion {
    std::uint64_t data;
    int res;
    unsigned flags;
  };
  io_uring_cqe* cqes[k_reap_batch];
  completion done[k_reap_batch];
  unsigned ops = 0;
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&m_ring, cqes, k_reap_batch);
    if (n == 0) return ops;
    // Copied out and released first: the tasks resumed below prepare new SQEs, and the
    // kernel may reuse the CQ slots.
    std::uint64_t ended = 0;
    for (unsigned i = 0; i < n; ++i) {
      done[i] = {cqes[i]->user_data, cqes[i]->res, cqes[i]->flags};
      if (done[i].data != k_wake_data) {
        ++ops;
        if ((done[i].flags & IORING_CQE_F_MORE) == 0) ++ended;
      }
    }
    m_inflight -= ended;
    m_completed.store(m_completed.load(std::memory_order_relaxed) + ended, std::memory_order_relaxed);
    io_uring_cq_advance(&m_ring, n);
    // A completion may be offered to an idle worker only while at least k_offer_behind
    // more of the batch wait behind it on this worker: tens of microseconds of work,
    // more than waking a parked worker costs. With less, or a lone completion (the
    // common case at low load), the task resumes here.
    unsigned last = n;
    if (offer)
      while (last > 0 && (done[last - 1].data == k_wake_data || done[last - 1].data == k_ignore_data)) --last;
    for (unsigned i = 0; i < n; ++i)
      dispatch(done[i].data, done[i].res, done[i].flags, offer && i + k_offer_behind < last);
    if (n < k_reap_batch) return ops;
  }
}

void uring_impl::enable_here() {
  if (m_enable_on_loop) {
    // liburing 2.3 (Debian 12) has no io_uring_enable_rings(): the register call itself.
    if (::syscall(__NR_io_uring_register, m_ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0)
      std::fprintf(stderr, "weft::io::uring_context: enabling the ring failed: %s\n", std::strerror(errno));
  }
  arm_wake();
}

void uring_impl::loop() {
  t_loop = this;
  weft::detail::t_executor = &m_owner;
  weft::detail::t_prio = 0;
  enable_here();
  std::vector<std::pair<void*, unsigned>> ready;
  std::optional<std::chrono::steady_clock::time_point> linger_until;  // stopping, with lingering()
  for (;;) {
    bool stopping = false;
    loop_call* calls = nullptr;
    {
      std::lock_guard lock(m_mutex);
      calls = std::exchange(m_calls, nullptr);
      m_calls_tail = &m_calls;
      m_has_calls.store(false, std::memory_order_relaxed);
      ready.swap(m_foreign_ready);
      stopping = m_stopping;
    }
    for (const auto& [h, prio] : ready) m_ready[prio].push_back(h);
    if (m_buffers != nullptr && m_buffers->has_foreign()) m_buffers->take_back_foreign();
    const bool had_calls = calls != nullptr;
    while (calls != nullptr) {
      loop_call* const c = calls;
      calls = c->m_next;  // read first: the call may free its node
      c->m_fn(c->m_arg);
    }
    ready.clear();

    const bool busy = run_ready();
    // Queued work done and closed listeners released (or k_linger_limit passed: the
    // ring's destruction releases them); tasks' in-flight ops are abandoned.
    if (stopping && !busy && !had_calls) {
      if (!lingering()) break;
      const auto now = std::chrono::steady_clock::now();
      if (!linger_until) linger_until = now + k_linger_limit;
      if (now >= *linger_until) break;
    }

    unsigned wait = 0;
    if (!busy) {
      std::lock_guard lock(m_mutex);
      if (m_calls == nullptr && m_foreign_ready.empty() && (!m_stopping || lingering())) {
        m_sleeping = true;
        wait = 1;
      }
    }
    if (wait != 0 && linger_until) {  // stopping: wait for the lingering CQEs in slices
      __kernel_timespec ts{.tv_sec = 0, .tv_nsec = 10'000'000};
      io_uring_cqe* cqe = nullptr;
      io_uring_submit_and_wait_timeout(&m_ring, &cqe, 1, &ts, nullptr);
    } else if (wait != 0 || io_uring_sq_ready(&m_ring) > 0) {
      const int r = io_uring_submit_and_wait(&m_ring, wait);
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME) {
        std::fprintf(stderr, "weft::io::uring_context: io_uring_enter failed: %s\n", std::strerror(-r));
      }
    }
    if (wait != 0) {
      std::lock_guard lock(m_mutex);
      m_sleeping = false;
    }
    reap();
  }
  weft::detail::t_executor = nullptr;
  t_loop = nullptr;
}

// ---- io_pool: a worker of the pool drives the ring -------------------------------------
//
// The worker loop (src/worker.cpp) polls the ring when it finds no work, and every few
// dozen items while it is busy. poll() runs the calls other threads queued, submits
// every SQE the worker's tasks prepared since the last poll and, while operations are in
// flight, enters the kernel once to collect completions (with deferred task work, that
// is when the kernel completes them); then it resumes their tasks inline. A parked
// worker waits in wait(): io_uring_enter for one CQE, with m_sleeping set so that a call
// queued meanwhile writes the eventfd; the pool's wakers write it unconditionally.

void uring_impl::attach(unsigned) noexcept {
  t_loop = this;
  enable_here();
  try {
    weft::detail::timer_watch(m_deadlines);
    m_deadlines_watched = true;
  } catch (const std::bad_alloc&) {
    // deadlines() is null then: this worker's deadlines go to the timer thread.
  }
}

bool uring_impl::run_calls() {
  loop_call* calls = nullptr;
  {
    std::lock_guard lock(m_mutex);
    calls = std::exchange(m_calls, nullptr);
    m_calls_tail = &m_calls;
    m_has_calls.store(false, std::memory_order_relaxed);
  }
  const bool any = calls != nullptr;
  while (calls != nullptr) {
    loop_call* const c = calls;
    calls = c->m_next;  // read first: the call may free its node
    c->m_fn(c->m_arg);
  }
  return any;
}

bool uring_impl::fire_deadlines() noexcept {
  using clock = std::chrono::steady_clock;
  if (m_deadlines.earliest() == clock::time_point::max()) return false;  // the common case: no clock read
  const auto now = clock::now();
  if (now < m_deadlines.earliest()) return false;
  m_deadlines.fire_due(now);
  return true;
}

buffer_pool* uring_impl::buffers(int& err) noexcept {
  if (m_buffers == nullptr)
    m_buffers = buffer_pool::make(this, m_ring, m_buffer_count, m_buffer_size, m_provided_buffers, err);
  return m_buffers;
}

bool uring_impl::poll() noexcept {
  if (m_buffers != nullptr && m_buffers->has_foreign()) m_buffers->take_back_foreign();
  bool ran = m_has_calls.load(std::memory_order_acquire) && run_calls();
  ran = fire_deadlines() || ran;
  if (m_inflight != 0 || io_uring_sq_ready(&m_ring) != 0) {
    const int r = io_uring_submit_and_get_events(&m_ring);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
      std::fprintf(stderr, "weft::io::io_pool: io_uring_enter failed: %s\n", std::strerror(-r));
  }
  return reap(true) != 0 || ran;
}

bool uring_impl::pending() const noexcept {
  if (m_has_calls.load(std::memory_order_acquire) || io_uring_cq_ready(&m_ring) != 0) return true;
  const auto first = m_deadlines.earliest();
  return first != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() >= first;
}

void uring_impl::wait() noexcept {
  {
    std::lock_guard lock(m_mutex);
    if (m_calls != nullptr) return;
    m_sleeping = true;
  }
  // Bounded by the earliest deadline, which then fires in the next poll (a wait with a
  // timeout through IORING_ENTER_EXT_ARG: no SQE, nothing in flight).
  int r = 0;
  const auto first = m_deadlines.earliest();
  if (first == std::chrono::steady_clock::time_point::max()) {
    r = io_uring_submit_and_wait(&m_ring, 1);
  } else {
    const auto left = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(first - std::chrono::steady_clock::now()).count());
    __kernel_timespec ts{.tv_sec = left / 1'000'000'000, .tv_nsec = left % 1'000'000'000};
    io_uring_cqe* cqe = nullptr;
    r = io_uring_submit_and_wait_timeout(&m_ring, &cqe, 1, &ts, nullptr);
  }
  if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME)
    std::fprintf(stderr, "weft::io::io_pool: io_uring_enter failed: %s\n", std::strerror(-r));
  std::lock_guard lock(m_mutex);
  m_sleeping = false;
}

void uring_impl::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(m_eventfd, &one, sizeof one);
}

void uring_impl::detach() noexcept {
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;  // operations from other threads are refused from now on
  }
  // Closed listeners still wait for their accept's last CQE, which frees their state;
  // nothing else is dispatched (the tasks of operations still in flight are abandoned).
  m_draining = true;
  // Deadlines of tasks still suspended: their coroutines may yet be resumed elsewhere
  // (and remove them), so the timer thread keeps them from now on.
  m_deadlines.hand_over();
  if (m_deadlines_watched) weft::detail::timer_unwatch(m_deadlines);
  m_deadlines_watched = false;
  const auto until = std::chrono::steady_clock::now() + k_linger_limit;
  while (lingering() && std::chrono::steady_clock::now() < until) {
    __kernel_timespec ts{.tv_sec = 0, .tv_nsec = 10'000'000};
    io_uring_cqe* cqe = nullptr;
    io_uring_submit_and_wait_timeout(&m_ring, &cqe, 1, &ts, nullptr);
    reap();
  }
  t_loop = nullptr;
}

}  // namespace detail

uring_context::uring_context(uring_options options) {
  m_rings.push_back(std::make_unique<detail::uring_impl>(*this, options));
}

uring_context::uring_context(detail::pool_mode, std::size_t rings, uring_options options) : m_pool_mode(true) {
  m_rings.reserve(rings);
  for (std::size_t i = 0; i < rings; ++i)
    m_rings.push_back(std::make_unique<detail::uring_impl>(*this, options, /*own_thread=*/false));
}

uring_context::~uring_context() {
  if (m_pool_mode) return;  // io_pool joined its workers already; the rings go with m_rings
  if (owns_current_thread()) {
    std::fprintf(stderr, "weft::io::uring_context: destroyed from its own thread (it would wait for itself)\n");
    std::abort();
  }
  m_rings[0]->stop();
}

void uring_context::schedule(std::coroutine_handle<> h, unsigned prio) {
  check_priority(*this, prio, "weft::io::uring_context::schedule");
  if (owns_current_thread()) {
    m_rings[0]->push_ready(h, prio);
  } else {
    m_rings[0]->post_ready(h, prio);
  }
}

unsigned uring_context::priorities() const noexcept { return m_rings[0]->m_priorities; }

bool uring_context::owns_current_thread() const noexcept { return weft::detail::t_executor == this; }

bool uring_context::has_multishot_accept() const noexcept { return m_rings[0]->m_multishot_accept; }

namespace detail {

bool uring_access::submit(uring_context& c, uring_op& op) {
  uring_impl* const here = uring_access::here(c);
  uring_impl& target = op.m_ring != nullptr ? *op.m_ring : here != nullptr ? *here : foreign_ring(c);
  if (&target == here) {
    if (op.m_kind == op_kind::custom) {
      if (op.m_start(op)) return false;
    } else {
      here->prepare(op);
    }
    uring_impl::watch_begin(op);
    return true;
  }
  op.m_call.m_fn = &uring_impl::start_foreign;
  op.m_call.m_arg = &op;
  target.post_call(op.m_call, true);
  return true;
}

void uring_access::invoke(uring_impl& r, loop_call& call) noexcept {
  if (uring_impl::current() == &r) {
    call.m_fn(call.m_arg);
  } else {
    r.post_call(call);
  }
}

}  // namespace detail

namespace detail {

bool uring_awaitable::suspend(std::coroutine_handle<> h) {
  // Under a token stopped already the operation is still started, and its watch fires as
  // it registers: the cancel follows the SQE into the kernel, so what the kernel does
  // without waiting (data there, room to send, a connection queued) is done, and a wait
  // is cut short (weft/stop.hpp), as over Asio.
  if (m_watch.m_token.stop_possible()) {
    m_watch.m_op = &m_op;
    m_op.m_watch = &m_watch;
  }
  m_op.m_waiter.capture(h);
  return uring_access::submit(*m_ctx, m_op);
}

}  // namespace detail

}  // namespace weft::io
