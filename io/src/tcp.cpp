// io/src/tcp.cpp: endpoint, tcp_stream, tcp_listener and sleep over the io_uring loop.
//
// The listener's accepts: one accept SQE (multishot where the kernel has it) stays in
// flight while somebody waits; its connections go to the waiting accept() calls in
// FIFO order, or into m_ready when nobody waits. m_ready is bounded (m_limit, the
// listen backlog): when it fills, the multishot accept is cancelled, so connections
// nobody asked for wait in the kernel's listen queue instead of taking an fd each here;
// an accept() that finds m_ready empty arms it again. All of listener_state is touched on
// the loop thread only (accept() from other threads is handed to the loop). close()
// cancels the SQE; the state is freed by the accept's last CQE (the one without
// IORING_CQE_F_MORE), so the kernel never writes into freed memory.
#include "weft/io/tcp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "uring_impl.hpp"
#include "weft/io/sleep.hpp"

namespace weft::io {

// ---- endpoint -------------------------------------------------------------------------------

endpoint endpoint::loopback(std::uint16_t port) noexcept {
  endpoint e;
  auto* in = reinterpret_cast<sockaddr_in*>(&e.m_addr);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  e.m_len = sizeof(sockaddr_in);
  return e;
}

endpoint endpoint::from(const sockaddr* a, socklen_t len) noexcept {
  endpoint e;
  if (a == nullptr) return e;
  const bool v4 = a->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in));
  const bool v6 = a->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6));
  if (!v4 && !v6) return e;
  const socklen_t n = v4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memcpy(&e.m_addr, a, n);
  e.m_len = n;
  return e;
}

endpoint endpoint::parse(std::string_view address, std::uint16_t port, std::error_code& ec) {
  ec.clear();
  endpoint e;
  char text[INET6_ADDRSTRLEN + 1];
  if (address.empty() || address.size() >= sizeof text) {
    ec = std::make_error_code(std::errc::invalid_argument);
    return {};
  }
  std::memcpy(text, address.data(), address.size());
  text[address.size()] = '\0';
  auto* in = reinterpret_cast<sockaddr_in*>(&e.m_addr);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&e.m_addr);
  if (::inet_pton(AF_INET, text, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    e.m_len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    e.m_len = sizeof(sockaddr_in6);
  } else {
    ec = std::make_error_code(std::errc::invalid_argument);
    return {};
  }
  return e;
}

std::uint16_t endpoint::port() const noexcept {
  if (m_addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&m_addr)->sin_port);
  if (m_addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&m_addr)->sin6_port);
  return 0;
}

std::string endpoint::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (m_addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&m_addr)->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(port());
  }
  if (m_addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&m_addr)->sin6_addr, text, sizeof text);
    // Appended in place: g++-12 -O3 mistakes `"[" + std::string(...)` for an overlapping
    // copy (a -Wrestrict false positive).
    std::string out = "[";
    out.append(text).append("]:").append(std::to_string(port()));
    return out;
  }
  return "(empty endpoint)";
}

namespace detail {

namespace {

// ECANCELED as error::cancelled, like the Asio backend's cancellations (use_task.hpp).
std::error_code errno_code(int err) noexcept {
  if (err == ECANCELED) return make_error_code(error::cancelled);
  return {err, std::system_category()};
}

std::error_code failure(const uring_op& op) noexcept {
  if (op.m_res == -ECANCELED && op.m_timed_out) return make_error_code(error::timed_out);
  return errno_code(-op.m_res);
}

std::uint32_t clamp_len(std::size_t len) noexcept {
  return static_cast<std::uint32_t>(std::min<std::size_t>(len, std::size_t{1} << 30));
}

}  // namespace

std::uint64_t new_socket_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);  // only uniqueness matters
}

io_result byte_result(const uring_op& op, bool zero_is_eof, bool closed) noexcept {
  // Closed locally: the shutdown ended it (a receive with 0, a send with EPIPE), which
  // says nothing of the peer; as on the Asio backend, it was cancelled.
  if (closed && op.m_res <= 0 && !op.m_timed_out) return {make_error_code(error::cancelled), 0};
  if (op.m_res < 0) return {failure(op), 0};
  if (op.m_res == 0 && zero_is_eof) return {make_error_code(error::eof), 0};
  return {{}, static_cast<std::size_t>(op.m_res)};
}

std::error_code status_result(const uring_op& op) noexcept {
  if (op.m_res < 0) return failure(op);
  return {};
}

// ---- read_some / write_some / write_all --------------------------------------------------

transfer_awaitable::transfer_awaitable(uring_context& ctx, op_kind kind, descriptor* d, std::uint64_t socket, void* buf,
                                       std::size_t len) noexcept
    : socket_awaitable(ctx, d) {
  m_op.m_kind = kind;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = socket;
  m_op.m_buf = buf;
  m_op.m_len = clamp_len(len);
}

write_all_awaitable::write_all_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket, const void* buf,
                                         std::size_t len) noexcept
    : socket_awaitable(ctx, d), m_total(len) {
  m_op.m_kind = op_kind::send;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = socket;
  m_op.m_buf = const_cast<void*>(buf);
  m_op.m_len = clamp_len(len);
  m_op.m_on_cqe = &on_cqe;
}

bool write_all_awaitable::on_cqe(uring_op& op, int res, unsigned) {
  auto* self = static_cast<write_all_awaitable*>(op.m_arg);
  if (res <= 0) return true;
  self->m_done += static_cast<std::size_t>(res);
  if (self->m_done >= self->m_total) return true;
  // A stop requested meanwhile (its cancel may have found no send in flight): end here.
  if (op.m_watch != nullptr && op.m_watch->m_fired.load(std::memory_order_acquire)) {
    self->m_stopped = true;
    return true;
  }
  op.m_buf = static_cast<char*>(op.m_buf) + res;
  op.m_len = clamp_len(self->m_total - self->m_done);
  uring_impl::current()->prepare(op, false);  // on the loop thread: send the rest
  return false;
}

io_result write_all_awaitable::await_resume() const noexcept {
  if (m_stopped) return {make_error_code(error::cancelled), m_done};
  if (m_desc.closed() && m_done < m_total && !m_op.m_timed_out) return {make_error_code(error::cancelled), m_done};
  if (m_op.m_res < 0) return {failure(m_op), m_done};
  if (m_op.m_res == 0 && m_done < m_total) return {errno_code(EPIPE), m_done};
  return {{}, m_done};
}

// ---- connect ------------------------------------------------------------------------------

connect_awaitable::connect_awaitable(uring_context& ctx, tcp_stream& stream, const endpoint& to,
                                     std::error_code early) noexcept
    : socket_awaitable(ctx, nullptr), m_stream(&stream), m_to(to), m_early(early) {
  if (m_early) return;
  if (m_to.empty() || m_to.port() == 0) {
    m_early = std::make_error_code(std::errc::invalid_argument);
  } else if (stream.is_open()) {
    m_early = std::make_error_code(std::errc::already_connected);
  }
}

bool connect_awaitable::open_socket() {
  const int fd = ::socket(m_to.data()->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    m_early = errno_code(errno);
    return false;
  }
  if (!m_stream->adopt(fd)) {
    m_early = std::make_error_code(std::errc::not_enough_memory);
    return false;
  }
  m_desc = descriptor_ref(m_stream->m_desc);
  m_op.m_kind = op_kind::connect;
  m_op.m_fd = fd;
  m_op.m_socket = m_stream->socket_id();
  m_op.m_buf = m_to.data();
  m_op.m_len = m_to.size();
  return true;
}

std::error_code connect_awaitable::await_resume() const noexcept {
  if (m_early) return m_early;
  std::error_code ec = status_result(m_op);
  if (m_desc.closed() && !m_op.m_timed_out) ec = make_error_code(error::cancelled);
  if (ec) m_stream->close();  // the stream can try again
  return ec;
}

// ---- sleep --------------------------------------------------------------------------------

sleep_awaitable::sleep_awaitable(uring_context& ctx, std::int64_t ns, bool absolute) noexcept : uring_awaitable(ctx) {
  m_op.m_kind = op_kind::timeout;
  m_op.m_abs = absolute;
  m_op.m_ts[0] = ns / 1'000'000'000;
  m_op.m_ts[1] = ns % 1'000'000'000;
}

std::error_code sleep_awaitable::await_resume() const noexcept {
  if (m_op.m_res == -ETIME || m_op.m_res >= 0) return {};
  return errno_code(-m_op.m_res);
}

// ---- listener -----------------------------------------------------------------------------

struct listener_state {
  uring_impl* m_ring = nullptr;  // every accept runs here (the loop thread of this ring)
  int m_fd = -1;
  // The listening socket's identity in the rings' fd map (uring_impl::note_socket): a
  // stream's stale cancel of the same fd number then leaves its accept alone.
  std::uint64_t m_id = 0;
  uring_op m_accept;  // the accept SQE in flight (multishot where the kernel has it)
  bool m_armed = false;
  bool m_pausing = false;  // m_ready is full: the accept SQE is being cancelled
  bool m_closing = false;
  std::size_t m_limit = 1;          // most connections m_ready holds (the listen backlog)
  std::deque<int> m_ready;          // accepted connections nobody waited for yet
  std::deque<uring_op*> m_waiters;  // accept() calls waiting, FIFO
  loop_call m_close_call;           // tcp_listener::close hands the close to the loop
  // The listener's reference (dropped when its close is done: finalize, or close_listener
  // when nothing is armed) plus one per accept_awaitable; the last frees the state.
  std::atomic<std::uint32_t> m_refs{1};
};

void drop_listener_ref(listener_state* st) noexcept {
  // acq_rel: the loop's last touch of the state happens before the delete.
  if (st->m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete st;
}

namespace {

bool on_accept_cqe(uring_op& op, int res, unsigned flags);

void arm(listener_state& st) {
  uring_impl& loop = *uring_impl::current();
  io_uring_sqe* s = loop.sqe();
  if (loop.m_multishot_accept) {
    io_uring_prep_multishot_accept(s, st.m_fd, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    io_uring_prep_accept(s, st.m_fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
  loop.note_socket(st.m_fd, st.m_id);
  st.m_accept.m_kind = op_kind::custom;
  st.m_accept.m_on_cqe = &on_accept_cqe;
  st.m_accept.m_arg = &st;
  io_uring_sqe_set_data64(s, reinterpret_cast<std::uintptr_t>(&st.m_accept));
  st.m_armed = true;
}

void cancel_accept(listener_state& st) {
  uring_impl& loop = *uring_impl::current();
  io_uring_sqe* s = loop.sqe();
  io_uring_prep_cancel64(s, reinterpret_cast<std::uintptr_t>(&st.m_accept), 0);
  io_uring_sqe_set_data64(s, k_ignore_data);
}

void close_fds(listener_state* st) {
  for (int fd : st->m_ready) ::close(fd);
  st->m_ready.clear();
  ::close(st->m_fd);
  st->m_fd = -1;
}

void finalize(listener_state* st) {
  close_fds(st);
  drop_listener_ref(st);
}

// Every CQE of the accept SQE. Never "finishes" the op: the waiters are resumed here,
// after the state is updated, and last (a resumed task may close the listener).
bool on_accept_cqe(uring_op& op, int res, unsigned flags) {
  auto* st = static_cast<listener_state*>(op.m_arg);
  const bool more = (flags & IORING_CQE_F_MORE) != 0;
  uring_op* wake = nullptr;
  if (res >= 0) {
    if (st->m_closing) {
      ::close(res);
    } else if (!st->m_waiters.empty()) {
      wake = st->m_waiters.front();
      st->m_waiters.pop_front();
      wake->m_res = res;
    } else {
      st->m_ready.push_back(res);
      // Full: stop taking connections (the kernel may still hand over a few it had
      // accepted; they are kept, not dropped). The last CQE below ends the pause.
      if (more && !st->m_pausing && st->m_ready.size() >= st->m_limit) {
        st->m_pausing = true;
        cancel_accept(*st);
      }
    }
  } else if (!st->m_closing && !(st->m_pausing && res == -ECANCELED) && !st->m_waiters.empty()) {
    // A paused accept's own cancel is no failure of the accept() that came meanwhile:
    // the last CQE below arms it again.
    wake = st->m_waiters.front();  // e.g. EMFILE: that accept() reports it
    st->m_waiters.pop_front();
    wake->m_res = res;
  }
  if (!more) {
    st->m_armed = false;
    st->m_pausing = false;
    if (st->m_closing) {
      uring_impl::current()->unlinger(st->m_close_call);
      finalize(st);
    } else if (!st->m_waiters.empty()) {
      arm(*st);
    }
  }
  if (wake != nullptr) uring_impl::finish_custom(*wake);
  return false;
}

// The last waiter was withdrawn (a stop, with_cancel): nobody is left to serve what the
// armed accept would take, so it is cancelled as a full m_ready pauses it (a draining
// server's listeners stop taking connections); the next accept() arms it again.
void pause_when_unwanted(listener_state& st) {
  if (!st.m_waiters.empty() || !st.m_armed || st.m_pausing || st.m_closing) return;
  st.m_pausing = true;
  cancel_accept(st);
}

// An accept() whose stop token fired (loop thread): ends it if it still waits.
bool cancel_accept_waiter(uring_op& op) {
  auto* st = static_cast<listener_state*>(op.m_arg);
  const auto it = std::find(st->m_waiters.begin(), st->m_waiters.end(), &op);
  if (it == st->m_waiters.end()) return false;
  st->m_waiters.erase(it);
  op.m_res = -ECANCELED;
  pause_when_unwanted(*st);
  return true;
}

bool start_accept(uring_op& op) {
  auto* st = static_cast<listener_state*>(op.m_arg);
  if (st == nullptr) {
    op.m_res = -EBADF;
    return true;
  }
  if (st->m_closing) {  // closed on its ring while this accept() was on its way there
    op.m_res = -ECANCELED;
    return true;
  }
  if (!st->m_ready.empty()) {
    op.m_res = st->m_ready.front();
    st->m_ready.pop_front();
    return true;
  }
  st->m_waiters.push_back(&op);
  op.m_pending = 1;  // its end: finish_custom
  op.m_cancel = &cancel_accept_waiter;
  if (!st->m_armed) arm(*st);
  return false;
}

void close_listener(void* p) {
  auto* st = static_cast<listener_state*>(p);
  st->m_closing = true;
  const bool armed = st->m_armed;
  if (armed) {
    st->m_accept.m_lingers = true;  // an io_pool stopping still dispatches its last CQE
    cancel_accept(*st);
    // Freed by the accept's last CQE (on_accept_cqe), which the loop waits for; the
    // close call has run, so its node (m_discard: finalize) marks the wait.
    uring_impl::current()->linger(st->m_close_call);
  } else {
    close_fds(st);
  }
  // The waiting accept() calls fail last, taken one at a time: nothing to allocate.
  // Queued to their executors, never resumed here: close() may run under the caller's
  // lock, which an accept loop resumed inline would then run under. Each holds a
  // reference: the state outlives them.
  while (!st->m_waiters.empty()) {
    uring_op* const w = st->m_waiters.front();
    st->m_waiters.pop_front();
    w->m_res = -ECANCELED;
    uring_impl::finish_custom_queued(*w);
  }
  if (!armed) drop_listener_ref(st);
}

/// tcp_stream::cancel from another thread: the queued call owns its node.
struct socket_cancel {
  loop_call m_call;
  int m_fd = -1;
  std::uint64_t m_socket = 0;
  static void run(void* p) {
    auto* self = static_cast<socket_cancel*>(p);
    uring_impl::current()->cancel_socket(self->m_fd, self->m_socket);
    delete self;
  }
  static void discard(void* p) { delete static_cast<socket_cancel*>(p); }
};

/// A listener closed from another thread once the loop had ended: its close never ran,
/// so the context's destruction releases it (no loop left, no waiter left to fail).
void discard_listener(void* p) { finalize(static_cast<listener_state*>(p)); }

}  // namespace

accept_awaitable::accept_awaitable(uring_context& ctx, listener_state* st) noexcept : uring_awaitable(ctx), m_hold(st) {
  // relaxed: the listener's own reference keeps it alive here (accept() does not race
  // with close()); the loop publishes nothing through the count.
  if (st != nullptr) st->m_refs.fetch_add(1, std::memory_order_relaxed);
  m_op.m_kind = op_kind::custom;
  m_op.m_start = &start_accept;
  m_op.m_arg = st;
  if (st != nullptr) m_op.m_ring = st->m_ring;  // the listener's state is its ring's alone
}

accept_awaitable::accept_awaitable(accept_awaitable&& o) noexcept
    : uring_awaitable(std::move(o)), m_hold(std::exchange(o.m_hold, nullptr)) {}

accept_awaitable::~accept_awaitable() {
  if (m_hold != nullptr) drop_listener_ref(m_hold);
}

accept_result accept_awaitable::await_resume() const noexcept {
  if (m_op.m_res < 0) return {errno_code(-m_op.m_res), tcp_stream(*m_ctx)};
  tcp_stream s(*m_ctx, m_op.m_res);
  if (!s.is_open()) return {std::make_error_code(std::errc::not_enough_memory), std::move(s)};  // closed it
  return {{}, std::move(s)};
}

}  // namespace detail

// ---- tcp_stream -----------------------------------------------------------------------------

tcp_stream& tcp_stream::operator=(tcp_stream&& o) noexcept {
  if (this != &o) {
    close();
    if (m_ctx != o.m_ctx) m_ctx = o.m_ctx;  // unwritten when equal: cancel() may read it meanwhile
    // Identity before fd: a cancel() reading the pair in between sees no socket.
    m_id.store(o.m_id.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_fd.store(o.m_fd.exchange(-1, std::memory_order_relaxed), std::memory_order_relaxed);
    if (m_desc != nullptr) m_desc->drop_ref();
    m_desc = std::exchange(o.m_desc, nullptr);
  }
  return *this;
}

bool tcp_stream::adopt(int fd) noexcept {
  if (m_desc != nullptr) std::exchange(m_desc, nullptr)->drop_ref();  // closed already: nothing is open
  if (fd >= 0) {
    m_desc = detail::descriptor::make(fd);
    if (m_desc == nullptr) {
      ::close(fd);
      fd = -1;
    }
  }
  m_id.store(fd >= 0 ? detail::new_socket_id() : 0, std::memory_order_relaxed);
  m_fd.store(fd, std::memory_order_relaxed);
  return fd >= 0;
}

int tcp_stream::release() noexcept {
  m_id.store(0, std::memory_order_relaxed);
  const int fd = m_fd.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) m_desc->release();
  return fd;
}

detail::connect_awaitable tcp_stream::connect(const endpoint& to) { return {*m_ctx, *this, to, {}}; }

detail::connect_awaitable tcp_stream::connect(std::string_view address, std::uint16_t port) {
  std::error_code ec;
  const endpoint to = endpoint::parse(address, port, ec);
  return {*m_ctx, *this, to, ec};
}

std::error_code tcp_stream::shutdown(int how) noexcept {
  const int fd = native_handle();
  if (fd < 0) return std::make_error_code(std::errc::bad_file_descriptor);
  if (::shutdown(fd, how) != 0) return {errno, std::system_category()};
  return {};
}

void tcp_stream::cancel() {
  // Either order of these two loads names one socket or none: an identity maps to one
  // fd, and the loop ignores a pair whose fd has since carried another socket's operations.
  const std::uint64_t id = socket_id();
  const int fd = native_handle();
  if (fd < 0 || id == 0) return;
  detail::cancel_everywhere(*m_ctx, fd, id);
}

namespace detail {

void cancel_everywhere(uring_context& ctx, int fd, std::uint64_t id) {
  // On an io_pool the object's operations may be in flight on any worker's ring (each
  // runs where its task was): every ring gets the cancel.
  uring_impl* const here = uring_access::here(ctx);
  for (std::size_t i = 0; i < uring_access::count(ctx); ++i) {
    uring_impl& ring = uring_access::ring(ctx, i);
    if (&ring == here) {
      ring.cancel_socket(fd, id);
      continue;
    }
    auto* c = new socket_cancel;  // std::bad_alloc leaves nothing more queued
    c->m_fd = fd;
    c->m_socket = id;
    c->m_call.m_fn = &socket_cancel::run;
    c->m_call.m_arg = c;
    c->m_call.m_discard = &socket_cancel::discard;
    ring.post_call(c->m_call);
  }
}

void close_and_cancel(uring_context& ctx, descriptor* d, std::uint64_t id) noexcept {
  if (d == nullptr || d->closed()) return;
  d->close();
  try {
    cancel_everywhere(ctx, d->fd(), id);
  } catch (const std::bad_alloc&) {
  }
}

}  // namespace detail

void tcp_stream::close() noexcept {
  // One caller wins the fd (a reader and a writer task may both close); the descriptor
  // closes the number once no operation of it can reach the kernel.
  if (m_fd.exchange(-1, std::memory_order_relaxed) < 0) return;
  m_desc->close();
}

std::error_code tcp_stream::set_no_delay(bool on) noexcept {
  const int v = on ? 1 : 0;
  if (::setsockopt(native_handle(), IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) != 0)
    return {errno, std::system_category()};
  return {};
}

// ---- tcp_listener ---------------------------------------------------------------------------

tcp_listener::tcp_listener(uring_context& ctx, std::size_t ring) : m_ctx(&ctx), m_ring(ring) {
  if (ring >= ctx.ring_count())
    throw std::out_of_range("weft::io::tcp_listener: ring " + std::to_string(ring) + " of a context with " +
                            std::to_string(ctx.ring_count()) + " rings");
}

std::error_code tcp_listener::listen(const endpoint& at, const listen_options& o) noexcept {
  const int backlog = o.backlog;
  if (m_state != nullptr) return std::make_error_code(std::errc::already_connected);
  if (at.empty()) return std::make_error_code(std::errc::invalid_argument);
  const int fd = ::socket(at.data()->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, std::system_category()};
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (o.reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
    const int err = errno;
    ::close(fd);
    return {err, std::system_category()};
  }
  if (::bind(fd, at.data(), at.size()) != 0 || ::listen(fd, backlog) != 0) {
    const int err = errno;
    ::close(fd);
    return {err, std::system_category()};
  }
  auto* st = new (std::nothrow) detail::listener_state;
  if (st == nullptr) {
    ::close(fd);
    return std::make_error_code(std::errc::not_enough_memory);
  }
  using detail::uring_access;
  if (m_ring != k_any_ring) {
    st->m_ring = &uring_access::ring(*m_ctx, m_ring);
  } else {
    detail::uring_impl* const here = uring_access::here(*m_ctx);
    st->m_ring = here != nullptr ? here : &uring_access::ring(*m_ctx, 0);
  }
  st->m_fd = fd;
  st->m_id = detail::new_socket_id();
  st->m_limit = backlog > 0 ? static_cast<std::size_t>(backlog) : 1;
  m_state = st;
  return {};
}

endpoint tcp_listener::local_endpoint() const noexcept {
  endpoint e;
  if (m_state == nullptr) return e;
  socklen_t len = sizeof(sockaddr_storage);
  if (::getsockname(m_state->m_fd, e.data(), &len) == 0) e.resize(len);
  return e;
}

void tcp_listener::close() noexcept {
  if (m_state == nullptr) return;
  detail::listener_state* const st = std::exchange(m_state, nullptr);
  st->m_close_call.m_fn = &detail::close_listener;
  st->m_close_call.m_arg = st;
  st->m_close_call.m_discard = &detail::discard_listener;
  detail::uring_access::invoke(*st->m_ring, st->m_close_call);  // allocates nothing: cannot fail
}

}  // namespace weft::io
