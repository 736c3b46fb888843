// io/src/udp.cpp: udp_socket and the datagram machinery it shares with unix_datagram,
// over sendmsg / recvmsg on the ring (weft/io/udp.hpp).
#include "weft/io/udp.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "weft/io/error.hpp"

namespace weft::io {

namespace detail {

void socket_address::set(const sockaddr* a, socklen_t len) noexcept {
  m_len = std::min<socklen_t>(len, sizeof m_addr);
  if (m_len > 0) std::memcpy(&m_addr, a, m_len);
}

// ---- datagram_socket ----------------------------------------------------------------------

datagram_socket::datagram_socket(datagram_socket&& o) noexcept
    : m_ctx(o.m_ctx), m_desc(std::exchange(o.m_desc, nullptr)), m_id(std::exchange(o.m_id, 0)), m_peer(o.m_peer) {}

datagram_socket::~datagram_socket() {
  close();
  if (m_desc != nullptr) m_desc->drop_ref();
}

bool datagram_socket::adopt(int fd) noexcept {
  descriptor* const d = descriptor::make(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  if (m_desc != nullptr) m_desc->drop_ref();  // a closed one: nothing of it is open
  m_desc = d;
  m_id = new_socket_id();
  return true;
}

std::error_code datagram_socket::open(int family) noexcept {
  if (is_open()) return std::make_error_code(std::errc::already_connected);
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, std::system_category()};
  if (!adopt(fd)) return std::make_error_code(std::errc::not_enough_memory);
  return {};
}

std::error_code datagram_socket::bind_to(const sockaddr* a, socklen_t len) noexcept {
  if (::bind(m_desc->fd(), a, len) != 0) {
    const int err = errno;
    close();
    return {err, std::system_category()};
  }
  return {};
}

std::error_code datagram_socket::connect_to(const sockaddr* a, socklen_t len) noexcept {
  if (!is_open()) {
    if (auto ec = open(a->sa_family)) return ec;
  }
  if (::connect(m_desc->fd(), a, len) != 0) return {errno, std::system_category()};
  m_peer.set(a, len);
  return {};
}

bool datagram_socket::local_address(socket_address& out) const noexcept {
  if (!is_open()) return false;
  out.m_len = sizeof out.m_addr;
  if (::getsockname(m_desc->fd(), reinterpret_cast<sockaddr*>(&out.m_addr), &out.m_len) != 0) return false;
  return true;
}

void datagram_socket::close() noexcept {
  // A datagram socket's shutdown ends no recvmsg: the pending ones are cancelled.
  close_and_cancel(*m_ctx, m_desc, m_id);
}

// ---- datagram_awaitable -------------------------------------------------------------------

datagram_awaitable::datagram_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, datagram_op what, void* buf,
                                       std::size_t len, const socket_address* peer) noexcept
    : socket_awaitable(ctx, d), m_what(what), m_len(len) {
  if (peer != nullptr) m_peer = *peer;
  switch (what) {
    case datagram_op::send_to:
      m_op.m_kind = op_kind::sendmsg;
      break;
    case datagram_op::receive_from:
      m_op.m_kind = op_kind::recvmsg;
      break;
    case datagram_op::send:
      m_op.m_kind = op_kind::send;
      break;
    case datagram_op::receive:
      m_op.m_kind = op_kind::recv_datagram;
      break;
  }
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = id;
  m_iov.iov_base = buf;
  m_iov.iov_len = len;
  m_op.m_buf = buf;  // send / receive; the msghdr ones point at m_msg when awaited
  m_op.m_len = static_cast<std::uint32_t>(std::min<std::size_t>(len, std::size_t{1} << 30));
}

datagram_awaitable::datagram_awaitable(datagram_awaitable&& o) noexcept
    : socket_awaitable(std::move(o)), m_what(o.m_what), m_len(o.m_len), m_peer(o.m_peer), m_iov(o.m_iov) {}

void datagram_awaitable::point_at_self() noexcept {
  if (m_what == datagram_op::send || m_what == datagram_op::receive) return;  // no msghdr
  m_msg = msghdr{};
  m_msg.msg_iov = &m_iov;
  m_msg.msg_iovlen = 1;
  if (m_what == datagram_op::receive_from) {
    m_msg.msg_name = &m_peer.m_addr;
    m_msg.msg_namelen = sizeof m_peer.m_addr;
  } else if (m_peer.m_len > 0) {
    m_msg.msg_name = &m_peer.m_addr;
    m_msg.msg_namelen = m_peer.m_len;
  }
  m_op.m_buf = &m_msg;
}

bool datagram_awaitable::try_send_now() noexcept {
  if (m_what != datagram_op::send && m_what != datagram_op::send_to) return false;
  if (!take_inline_budget()) return false;  // this one through the ring (see there)
  // Holds the number open through the syscall (as a submitted operation would); closed or
  // no socket: the ring path reports it.
  if (m_desc.begin() != 0) return false;
  const int fd = m_op.m_fd;
  const ssize_t r = m_what == datagram_op::send ? ::send(fd, m_iov.iov_base, m_iov.iov_len, MSG_DONTWAIT | MSG_NOSIGNAL)
                                                : ::sendmsg(fd, &m_msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;  // to the ring
  m_op.m_res = r >= 0 ? static_cast<int>(r) : -errno;
  return true;
}

std::error_code datagram_awaitable::finish(std::size_t& n, std::size_t& size, const sockaddr*& from,
                                           socklen_t& from_len) const noexcept {
  const bool receiving = m_what == datagram_op::receive_from || m_what == datagram_op::receive;
  if (m_op.m_res < 0 || (m_desc.closed() && m_op.m_res == 0 && receiving)) {
    if (m_desc.closed() && !m_op.m_timed_out) return make_error_code(error::cancelled);
    if (m_op.m_res == -ECANCELED && m_op.m_timed_out) return make_error_code(error::timed_out);
    if (m_op.m_res == -ECANCELED) return make_error_code(error::cancelled);
    return {-m_op.m_res, std::system_category()};
  }
  size = static_cast<std::size_t>(m_op.m_res);
  n = std::min(size, m_len);
  from = reinterpret_cast<const sockaddr*>(&m_peer.m_addr);
  from_len = m_what == datagram_op::receive_from ? m_msg.msg_namelen : m_peer.m_len;
  if (receiving && size > m_len) return std::make_error_code(std::errc::message_size);
  return {};
}

}  // namespace detail

// ---- udp_socket ---------------------------------------------------------------------------

std::error_code udp_socket::bind(const endpoint& at, const udp_options& o) noexcept {
  if (at.empty()) return std::make_error_code(std::errc::invalid_argument);
  if (auto ec = open(at.data()->sa_family)) return ec;
  const int fd = m_desc->fd();
  const int on = 1;
  // Not on port 0: Linux may give two SO_REUSEADDR datagram sockets the same picked port,
  // and then one peer's datagrams reach the other socket. A picked port is this one's.
  const bool reuse_address = o.reuse_address && at.port() != 0;
  if ((reuse_address && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) ||
      (o.reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0)) {
    const int err = errno;
    close();
    return {err, std::system_category()};
  }
  return bind_to(at.data(), at.size());
}

std::error_code udp_socket::connect(const endpoint& peer) noexcept {
  if (peer.empty()) return std::make_error_code(std::errc::invalid_argument);
  return connect_to(peer.data(), peer.size());
}

detail::basic_datagram_awaitable<endpoint> udp_socket::send_to(const void* buf, std::size_t len,
                                                               const endpoint& to) noexcept {
  detail::socket_address a;
  a.set(to.data(), to.size());
  return op<endpoint>(detail::datagram_op::send_to, const_cast<void*>(buf), len, &a);
}

endpoint udp_socket::local_endpoint() const noexcept {
  detail::socket_address a;
  if (!local_address(a)) return {};
  return endpoint::from(reinterpret_cast<const sockaddr*>(&a.m_addr), a.m_len);
}

}  // namespace weft::io
