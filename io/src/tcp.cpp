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
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "buffer_pool.hpp"
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

namespace {
// Operations completed at once in a row on this thread, before one goes to the ring
// anyway: a task that streams datagrams into a socket with room would otherwise never
// suspend, and its worker would run nothing else (its siblings, a fork's continuation).
constexpr int k_inline_budget = 32;
thread_local int t_inline_left = k_inline_budget;
}  // namespace

bool take_inline_budget() noexcept {
  if (--t_inline_left > 0) return true;
  t_inline_left = k_inline_budget;
  return false;
}

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

// ---- receive: into a buffer of the ring's pool ---------------------------------------------

receive_awaitable::receive_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket) noexcept
    : socket_awaitable(ctx, d) {
  m_op.m_kind = op_kind::prepared;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = socket;
  m_op.m_prep = &prep;
  m_op.m_on_cqe = &on_cqe;
}

void receive_awaitable::prep(io_uring_sqe* sqe, uring_op& op) {
  auto* self = static_cast<receive_awaitable*>(op.m_arg);
  if (self->m_pool == nullptr) {  // on its ring's thread: that ring's pool
    int err = ENOMEM;
    self->m_pool = uring_impl::current()->buffers(err);
    if (self->m_pool == nullptr) {
      self->m_no_pool = true;
      self->m_res = -err;
      io_uring_prep_nop(sqe);
      return;
    }
  }
  if (self->m_pool->provided()) {
    io_uring_prep_recv(sqe, op.m_fd, nullptr, static_cast<unsigned>(self->m_pool->buffer_size()), 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = buffer_pool::k_group;
  } else {
    io_uring_prep_poll_add(sqe, op.m_fd, POLLIN);
  }
}

bool receive_awaitable::again(uring_op& op) {
  // A stop requested meanwhile may have found nothing in flight to cancel: end here.
  auto* self = static_cast<receive_awaitable*>(op.m_arg);
  if (op.m_watch != nullptr && op.m_watch->m_fired.load(std::memory_order_acquire)) {
    self->m_res = -ECANCELED;
    return true;
  }
  // The linked timeout goes again too, and is one more CQE: the old one still comes.
  if (op.m_link_timeout) ++op.m_pending;
  uring_impl::current()->prepare(op, false);
  return false;
}

bool receive_awaitable::on_cqe(uring_op& op, int res, unsigned flags) {
  auto* self = static_cast<receive_awaitable*>(op.m_arg);
  self->m_ran = true;
  if (self->m_no_pool) return true;  // the nop: m_res says why
  buffer_pool& pool = *self->m_pool;
  if (pool.provided()) {
    if ((flags & IORING_CQE_F_BUFFER) != 0) {
      self->m_id = static_cast<std::uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
      self->m_has_buffer = true;
    }
    // Every buffer in the ring taken: nothing was read. Those given back on other threads
    // may be waiting to go back into it, or the pool has buffers not put into it yet;
    // then receive again.
    if (res == -ENOBUFS && (pool.take_back_foreign() > 0 || pool.publish_more() > 0)) return again(op);
    self->m_res = res;
    return true;
  }
  if (res < 0) {  // the poll failed or was cancelled
    self->m_res = res;
    return true;
  }
  std::uint16_t id = 0;
  if (!pool.take(id)) {
    self->m_res = -ENOBUFS;
    return true;
  }
  // Readable: the descriptor is held open while the operation runs, so the number is still
  // this socket's.
  const ssize_t n = ::recv(op.m_fd, pool.data(id), pool.buffer_size(), MSG_DONTWAIT);
  if (n < 0) {
    const int err = errno;
    pool.give_back_here(id);
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return again(op);  // taken by another reader
    self->m_res = -err;
    return true;
  }
  self->m_id = id;
  self->m_has_buffer = true;
  self->m_res = static_cast<int>(n);
  return true;
}

receive_result receive_awaitable::await_resume() noexcept {
  receive_result r;
  const int res = m_ran ? m_res : m_op.m_res;  // not run: never submitted (no socket, or closed)
  if (m_has_buffer) r.buf = m_pool->lease(m_id, res > 0 ? static_cast<std::size_t>(res) : 0);
  if (m_desc.closed() && res <= 0 && !m_op.m_timed_out) {  // as byte_result
    r.buf.reset();
    r.ec = make_error_code(error::cancelled);
  } else if (res < 0) {
    r.buf.reset();
    if (res == -ENOBUFS)
      r.ec = std::make_error_code(std::errc::no_buffer_space);
    else if (res == -ECANCELED && m_op.m_timed_out)
      r.ec = make_error_code(error::timed_out);
    else
      r.ec = errno_code(-res);
  } else if (res == 0) {
    r.buf.reset();
    r.ec = make_error_code(error::eof);
  }
  return r;
}

// ---- vectored read_some / write_some / write_all ------------------------------------------

vector_transfer_awaitable::vector_transfer_awaitable(uring_context& ctx, bool send, descriptor* d, std::uint64_t socket,
                                                     const iovec* bufs, std::size_t count) noexcept
    : socket_awaitable(ctx, d), m_bufs(bufs), m_count(count) {
  m_op.m_kind = send ? op_kind::sendmsg : op_kind::recvmsg_stream;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = socket;
  for (std::size_t i = 0; i < count && !m_any; ++i) m_any = bufs[i].iov_len > 0;
}

vector_transfer_awaitable::vector_transfer_awaitable(vector_transfer_awaitable&& o) noexcept
    : socket_awaitable(std::move(o)), m_bufs(o.m_bufs), m_count(o.m_count), m_any(o.m_any) {}

void vector_transfer_awaitable::point_at_self() noexcept {
  m_msg = msghdr{};
  m_msg.msg_iov = const_cast<iovec*>(m_bufs);  // the kernel reads the array, never writes it
  m_msg.msg_iovlen = m_count;
  m_op.m_buf = &m_msg;
}

io_result vector_transfer_awaitable::await_resume() const noexcept {
  return byte_result(m_op, m_op.m_kind == op_kind::recvmsg_stream && m_any, m_desc.closed());
}

vector_write_all_awaitable::vector_write_all_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket,
                                                       const iovec* bufs, std::size_t count) noexcept
    : socket_awaitable(ctx, d), m_count(count) {
  m_op.m_kind = op_kind::sendmsg;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = socket;
  m_op.m_on_cqe = &on_cqe;
  if (count > k_inline) {
    m_heap = new (std::nothrow) iovec[count];
    if (m_heap == nullptr) {
      m_nomem = true;
      return;
    }
  }
  iovec* const to = list();
  for (std::size_t i = 0; i < count; ++i) {
    to[i] = bufs[i];
    m_total += bufs[i].iov_len;
  }
}

vector_write_all_awaitable::vector_write_all_awaitable(vector_write_all_awaitable&& o) noexcept
    : socket_awaitable(std::move(o)),
      m_heap(std::exchange(o.m_heap, nullptr)),
      m_count(o.m_count),
      m_total(o.m_total),
      m_nomem(o.m_nomem) {
  std::copy(std::begin(o.m_inline), std::end(o.m_inline), m_inline);
}

vector_write_all_awaitable::~vector_write_all_awaitable() { delete[] m_heap; }

void vector_write_all_awaitable::point_at_self() noexcept {
  m_op.m_arg = this;
  m_msg = msghdr{};
  m_msg.msg_iov = list() + m_first;
  m_msg.msg_iovlen = m_count - m_first;
  m_op.m_buf = &m_msg;
}

bool vector_write_all_awaitable::on_cqe(uring_op& op, int res, unsigned) {
  auto* self = static_cast<vector_write_all_awaitable*>(op.m_arg);
  if (res <= 0) return true;
  self->m_done += static_cast<std::size_t>(res);
  if (self->m_done >= self->m_total) return true;
  if (op.m_watch != nullptr && op.m_watch->m_fired.load(std::memory_order_acquire)) {
    self->m_stopped = true;  // as write_all_awaitable::on_cqe
    return true;
  }
  // Skips the buffers sent in full and trims the one sent in part (the copy is ours).
  auto left = static_cast<std::size_t>(res);
  iovec* const v = self->list();
  while (left > 0) {
    iovec& b = v[self->m_first];
    const std::size_t take = std::min(left, b.iov_len);
    b.iov_base = static_cast<char*>(b.iov_base) + take;
    b.iov_len -= take;
    left -= take;
    if (b.iov_len == 0) ++self->m_first;
  }
  while (self->m_first < self->m_count && v[self->m_first].iov_len == 0) ++self->m_first;
  self->point_at_self();
  uring_impl::current()->prepare(op, false);  // on the loop thread: send the rest
  return false;
}

io_result vector_write_all_awaitable::await_resume() const noexcept {
  if (m_nomem) return {std::make_error_code(std::errc::not_enough_memory), 0};
  if (m_total == 0) return {{}, 0};
  if (m_stopped) return {make_error_code(error::cancelled), m_done};
  if (m_desc.closed() && m_done < m_total && !m_op.m_timed_out) return {make_error_code(error::cancelled), m_done};
  if (m_op.m_res < 0) return {failure(m_op), m_done};
  if (m_op.m_res == 0 && m_done < m_total) return {errno_code(EPIPE), m_done};
  return {{}, m_done};
}

// ---- connect ------------------------------------------------------------------------------

connect_awaitable::connect_awaitable(uring_context& ctx, basic_stream& stream, const sockaddr* to, socklen_t len,
                                     std::error_code early) noexcept
    : socket_awaitable(ctx, nullptr), m_stream(&stream), m_early(early) {
  if (m_early) return;
  if (to == nullptr || len == 0 || len > sizeof m_to) {
    m_early = std::make_error_code(std::errc::invalid_argument);
  } else if (stream.is_open()) {
    m_early = std::make_error_code(std::errc::already_connected);
  } else {
    std::memcpy(&m_to, to, len);
    m_to_len = len;
  }
}

bool connect_awaitable::open_socket() {
  const int fd = ::socket(m_to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
  m_op.m_buf = &m_to;
  m_op.m_len = m_to_len;
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

accept_awaitable_base::accept_awaitable_base(uring_context& ctx, listener_state* st, bool closed) noexcept
    : uring_awaitable(ctx), m_hold(st), m_after_close(st == nullptr && closed) {
  // relaxed: the listener's own reference keeps it alive here (accept() does not race
  // with close()); the loop publishes nothing through the count.
  if (st != nullptr) st->m_refs.fetch_add(1, std::memory_order_relaxed);
  m_op.m_kind = op_kind::custom;
  m_op.m_start = &start_accept;
  m_op.m_arg = st;
  if (st != nullptr) m_op.m_ring = st->m_ring;  // the listener's state is its ring's alone
}

accept_awaitable_base::accept_awaitable_base(accept_awaitable_base&& o) noexcept
    : uring_awaitable(std::move(o)), m_hold(std::exchange(o.m_hold, nullptr)), m_after_close(o.m_after_close) {}

accept_awaitable_base::~accept_awaitable_base() {
  if (m_hold != nullptr) drop_listener_ref(m_hold);
}

std::error_code accept_awaitable_base::failure() const noexcept {
  if (m_after_close) return errno_code(ECANCELED);  // the closed state is gone: no operation ran on it
  if (m_op.m_res < 0) return errno_code(-m_op.m_res);
  return {};
}

}  // namespace detail

// ---- tcp_stream -----------------------------------------------------------------------------

namespace detail {

void basic_stream::move_from(basic_stream& o) noexcept {
  if (this != &o) {
    close();
    if (m_ctx != o.m_ctx) m_ctx = o.m_ctx;  // unwritten when equal: cancel() may read it meanwhile
    // Identity before fd: a cancel() reading the pair in between sees no socket.
    m_id.store(o.m_id.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_fd.store(o.m_fd.exchange(-1, std::memory_order_relaxed), std::memory_order_relaxed);
    if (m_desc != nullptr) m_desc->drop_ref();
    m_desc = std::exchange(o.m_desc, nullptr);
  }
}

bool basic_stream::adopt(int fd) noexcept {
  if (m_desc != nullptr) std::exchange(m_desc, nullptr)->drop_ref();  // closed already: nothing is open
  if (fd >= 0) {
    m_desc = descriptor::make(fd);
    if (m_desc == nullptr) {
      ::close(fd);
      fd = -1;
    }
  }
  m_id.store(fd >= 0 ? new_socket_id() : 0, std::memory_order_relaxed);
  m_fd.store(fd, std::memory_order_relaxed);
  return fd >= 0;
}

int basic_stream::release() noexcept {
  m_id.store(0, std::memory_order_relaxed);
  const int fd = m_fd.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) m_desc->release();
  return fd;
}

std::error_code basic_stream::shutdown(int how) noexcept {
  const int fd = native_handle();
  if (fd < 0) return std::make_error_code(std::errc::bad_file_descriptor);
  if (::shutdown(fd, how) != 0) return {errno, std::system_category()};
  return {};
}

void basic_stream::cancel() {
  // Either order of these two loads names one socket or none: an identity maps to one
  // fd, and the loop ignores a pair whose fd has since carried another socket's operations.
  const std::uint64_t id = socket_id();
  const int fd = native_handle();
  if (fd < 0 || id == 0) return;
  cancel_everywhere(*m_ctx, fd, id);
}

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

void basic_stream::close() noexcept {
  // One caller wins the fd (a reader and a writer task may both close); the descriptor
  // closes the number once no operation of it can reach the kernel.
  if (m_fd.exchange(-1, std::memory_order_relaxed) < 0) return;
  m_desc->close();
}

}  // namespace detail

detail::connect_awaitable tcp_stream::connect(const endpoint& to) noexcept {
  std::error_code early;
  if (to.empty() || to.port() == 0) early = std::make_error_code(std::errc::invalid_argument);
  return connect_to(to.data(), to.size(), early);
}

detail::connect_awaitable tcp_stream::connect(std::string_view address, std::uint16_t port) {
  std::error_code ec;
  const endpoint to = endpoint::parse(address, port, ec);
  if (ec) return connect_to(nullptr, 0, ec);
  return connect(to);
}

endpoint tcp_stream::remote_endpoint() const noexcept {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (native_handle() < 0 || ::getpeername(native_handle(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  return endpoint::from(reinterpret_cast<const sockaddr*>(&a), len);
}

endpoint tcp_stream::local_endpoint() const noexcept {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (native_handle() < 0 || ::getsockname(native_handle(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  return endpoint::from(reinterpret_cast<const sockaddr*>(&a), len);
}

std::error_code tcp_stream::set_no_delay(bool on) noexcept {
  const int v = on ? 1 : 0;
  if (::setsockopt(native_handle(), IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) != 0)
    return {errno, std::system_category()};
  return {};
}

// ---- tcp_listener ---------------------------------------------------------------------------

namespace detail {

basic_listener::basic_listener(uring_context& ctx, std::size_t ring, const char* type) : m_ctx(&ctx), m_ring(ring) {
  if (ring >= ctx.ring_count())
    throw std::out_of_range(std::string("weft::io::") + type + ": ring " + std::to_string(ring) +
                            " of a context with " + std::to_string(ctx.ring_count()) + " rings");
}

std::error_code basic_listener::open(int family, int backlog, int (*prepare)(int fd, const void* arg),
                                     const void* arg) noexcept {
  if (m_state != nullptr) return std::make_error_code(std::errc::already_connected);
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, std::system_category()};
  if (const int err = prepare(fd, arg); err != 0) {
    ::close(fd);
    return {err, std::system_category()};
  }
  if (::listen(fd, backlog) != 0) {
    const int err = errno;
    ::close(fd);
    return {err, std::system_category()};
  }
  auto* st = new (std::nothrow) listener_state;
  if (st == nullptr) {
    ::close(fd);
    return std::make_error_code(std::errc::not_enough_memory);
  }
  if (m_ring != k_any_ring) {
    st->m_ring = &uring_access::ring(*m_ctx, m_ring);
  } else {
    uring_impl* const here = uring_access::here(*m_ctx);
    st->m_ring = here != nullptr ? here : &uring_access::ring(*m_ctx, 0);
  }
  st->m_fd = fd;
  st->m_id = new_socket_id();
  st->m_limit = backlog > 0 ? static_cast<std::size_t>(backlog) : 1;
  m_state = st;
  m_closed = false;
  return {};
}

int basic_listener::fd() const noexcept { return m_state != nullptr ? m_state->m_fd : -1; }

void basic_listener::close() noexcept {
  if (m_state == nullptr) return;
  listener_state* const st = std::exchange(m_state, nullptr);
  m_closed = true;
  st->m_close_call.m_fn = &close_listener;
  st->m_close_call.m_arg = st;
  st->m_close_call.m_discard = &discard_listener;
  uring_access::invoke(*st->m_ring, st->m_close_call);  // allocates nothing: cannot fail
}

}  // namespace detail

namespace {
// tcp_listener::listen's socket options and bind (an errno on failure).
int prepare_tcp(int fd, const void* arg) {
  const auto& [at, o] = *static_cast<const std::pair<const endpoint*, const listen_options*>*>(arg);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (o->reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return errno;
  if (::bind(fd, at->data(), at->size()) != 0) return errno;
  return 0;
}
}  // namespace

std::error_code tcp_listener::listen(const endpoint& at, const listen_options& o) noexcept {
  if (is_open()) return std::make_error_code(std::errc::already_connected);
  if (at.empty()) return std::make_error_code(std::errc::invalid_argument);
  const std::pair<const endpoint*, const listen_options*> arg{&at, &o};
  return open(at.data()->sa_family, o.backlog, &prepare_tcp, &arg);
}

endpoint tcp_listener::local_endpoint() const noexcept {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (fd() < 0 || ::getsockname(fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  return endpoint::from(reinterpret_cast<const sockaddr*>(&a), len);
}

}  // namespace weft::io
