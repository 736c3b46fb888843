// io/src/udp.cpp: udp_socket over sendmsg / recvmsg on the ring (weft/io/udp.hpp).
#include "weft/io/udp.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <utility>

#include "weft/io/error.hpp"

namespace weft::io {

udp_socket::udp_socket(udp_socket&& o) noexcept
    : m_ctx(o.m_ctx), m_desc(std::exchange(o.m_desc, nullptr)), m_id(std::exchange(o.m_id, 0)), m_peer(o.m_peer) {}

udp_socket::~udp_socket() {
  close();
  if (m_desc != nullptr) m_desc->drop_ref();
}

std::error_code udp_socket::open(int family) noexcept {
  if (m_desc != nullptr && !m_desc->closed()) return std::make_error_code(std::errc::already_connected);
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, std::system_category()};
  detail::descriptor* const d = detail::descriptor::make(fd);
  if (d == nullptr) {
    ::close(fd);
    return std::make_error_code(std::errc::not_enough_memory);
  }
  if (m_desc != nullptr) m_desc->drop_ref();  // a closed one: nothing of it is open
  m_desc = d;
  m_id = detail::new_socket_id();
  return {};
}

std::error_code udp_socket::bind(const endpoint& at, const udp_options& o) noexcept {
  if (at.empty()) return std::make_error_code(std::errc::invalid_argument);
  if (auto ec = open(at.data()->sa_family)) return ec;
  const int fd = m_desc->fd();
  const int on = 1;
  if ((o.reuse_address && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) ||
      (o.reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) ||
      ::bind(fd, at.data(), at.size()) != 0) {
    const int err = errno;
    close();
    return {err, std::system_category()};
  }
  return {};
}

std::error_code udp_socket::connect(const endpoint& peer) noexcept {
  if (peer.empty()) return std::make_error_code(std::errc::invalid_argument);
  if (!is_open()) {
    if (auto ec = open(peer.data()->sa_family)) return ec;
  }
  if (::connect(m_desc->fd(), peer.data(), peer.size()) != 0) return {errno, std::system_category()};
  m_peer = peer;
  return {};
}

endpoint udp_socket::local_endpoint() const noexcept {
  if (!is_open()) return {};
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(m_desc->fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  return endpoint::from(reinterpret_cast<const sockaddr*>(&a), len);
}

void udp_socket::close() noexcept {
  // A datagram socket's shutdown ends no recvmsg: the pending ones are cancelled.
  detail::close_and_cancel(*m_ctx, m_desc, m_id);
}

namespace detail {

datagram_awaitable::datagram_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, datagram_op what, void* buf,
                                       std::size_t len, const endpoint* peer) noexcept
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
    m_msg.msg_name = m_peer.data();
    m_msg.msg_namelen = sizeof(sockaddr_storage);
  } else if (!m_peer.empty()) {
    m_msg.msg_name = m_peer.data();
    m_msg.msg_namelen = m_peer.size();
  }
  m_op.m_buf = &m_msg;
}

datagram_result datagram_awaitable::await_resume() const noexcept {
  datagram_result r;
  const bool receiving = m_what == datagram_op::receive_from || m_what == datagram_op::receive;
  if (m_op.m_res < 0 || (m_desc.closed() && m_op.m_res == 0 && receiving)) {
    if (m_desc.closed() && !m_op.m_timed_out) {
      r.ec = make_error_code(error::cancelled);
    } else if (m_op.m_res == -ECANCELED && m_op.m_timed_out) {
      r.ec = make_error_code(error::timed_out);
    } else if (m_op.m_res == -ECANCELED) {
      r.ec = make_error_code(error::cancelled);
    } else {
      r.ec = std::error_code(-m_op.m_res, std::system_category());
    }
    return r;
  }
  r.size = static_cast<std::size_t>(m_op.m_res);
  r.n = std::min(r.size, m_len);
  r.from = m_what == datagram_op::receive_from ? endpoint::from(m_peer.data(), m_msg.msg_namelen) : m_peer;
  if (receiving && r.size > m_len) r.ec = std::make_error_code(std::errc::message_size);
  return r;
}

}  // namespace detail

}  // namespace weft::io
