// weft/io/udp.hpp: UDP sockets of the io_uring backend.
//
//   weft::io::udp_socket s(io);
//   if (auto ec = s.bind(weft::io::endpoint::loopback(5300))) ...
//   auto d = co_await s.receive_from(buf, sizeof buf);   // {ec, n, from}
//   auto w = co_await s.send_to(buf, d.n, d.from);       // {ec, n}
//
// One datagram per operation. A datagram larger than the buffer is not cut silently:
// receive_from / receive yield std::errc::message_size with `n` the bytes kept (the
// buffer's length) and `size` the datagram's. On an io_pool, one socket per worker
// bound with udp_options::reuse_port spreads the datagrams of different peers over the
// workers (the kernel hashes the peer's address). The fd is owned as a tcp_stream's
// (weft/io/detail/descriptor.hpp): close() may race the socket's operations, none of
// them ever reaches a socket that reuses the number.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "weft/io/tcp.hpp"
#include "weft/io/uring_context.hpp"

namespace weft::io {

/// How udp_socket::bind makes its socket. A plain value.
struct udp_options {
  bool reuse_port = false;    ///< SO_REUSEPORT: several sockets (one per worker) on one port
  bool reuse_address = true;  ///< SO_REUSEADDR
};

/// What receive_from / receive yield: `n` bytes stored of a datagram of `size` bytes
/// from `from` (receive: the connected peer). `ec`: empty; std::errc::message_size when
/// the datagram was larger than the buffer (`n` < `size`, the rest is lost); else the
/// failure (error::cancelled when stopped or closed), with n == size == 0.
struct datagram_result {
  std::error_code ec;
  std::size_t n = 0;
  std::size_t size = 0;
  endpoint from;
};

class udp_socket;

namespace detail {

/// Which datagram operation: sendmsg / recvmsg with an address, or (connected) a plain
/// send / recv, which need no msghdr.
enum class datagram_op : std::uint8_t { send_to, receive_from, send, receive };

/// send_to / receive_from / send / receive: one datagram operation on the ring.
class datagram_awaitable : public socket_awaitable {
 public:
  /// `peer`: send_to's destination; for send / receive the connected peer (what
  /// receive reports as `from`); null for receive_from.
  datagram_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, datagram_op what, void* buf, std::size_t len,
                     const endpoint* peer) noexcept;
  datagram_awaitable(datagram_awaitable&& o) noexcept;
  datagram_awaitable& operator=(datagram_awaitable&&) = delete;
  static constexpr bool k_linked_timeout_ok = true;  // weft::io::with_timeout applies
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    point_at_self();  // here: the awaitable may have been moved since it was made
    return socket_awaitable::await_suspend(h);
  }
  datagram_result await_resume() const noexcept;

 private:
  void point_at_self() noexcept;

  datagram_op m_what;
  std::size_t m_len;
  endpoint m_peer;  // send_to: the destination; receive_from: the source, filled in; else the peer
  iovec m_iov{};
  msghdr m_msg{};
};

}  // namespace detail

/// A UDP socket of a uring_context (either kind, as tcp_stream). Move-only; closes on
/// destruction. Operations may be awaited from any thread, several at once; close() may
/// be called from any thread at any time (pending operations end with
/// error::cancelled). The context must outlive it.
class udp_socket {
 public:
  /// A socket not open yet: bind() or connect() makes it.
  explicit udp_socket(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  /// Takes over `o`'s socket; `o` is left closed.
  udp_socket(udp_socket&& o) noexcept;
  udp_socket& operator=(udp_socket&&) = delete;
  ~udp_socket();

  /// Makes the socket (the family of `at`) and binds it (port 0: a free port). Errors:
  /// invalid_argument (empty endpoint), address_in_use, already_connected (open).
  std::error_code bind(const endpoint& at, const udp_options& o = {}) noexcept;
  /// Sets the default peer (making the socket, of the peer's family, when not bound):
  /// send() / receive() then talk to it alone, and ICMP errors from it come back
  /// (connection_refused on a later operation). Synchronous. Errors: invalid_argument.
  std::error_code connect(const endpoint& peer) noexcept;

  /// Sends one datagram of `len` bytes to `to`: {ec, n}.
  detail::datagram_awaitable send_to(const void* buf, std::size_t len, const endpoint& to) noexcept {
    return {*m_ctx, m_desc, m_id, detail::datagram_op::send_to, const_cast<void*>(buf), len, &to};
  }
  /// Receives one datagram into `buf` (see datagram_result).
  detail::datagram_awaitable receive_from(void* buf, std::size_t len) noexcept {
    return {*m_ctx, m_desc, m_id, detail::datagram_op::receive_from, buf, len, nullptr};
  }
  /// send_to(the connected peer), through a plain send (no address to pass). On a socket
  /// that is not connected: destination_address_required.
  detail::datagram_awaitable send(const void* buf, std::size_t len) noexcept {
    return {*m_ctx, m_desc, m_id, detail::datagram_op::send, const_cast<void*>(buf), len, &m_peer};
  }
  /// receive_from on a connected socket (only the peer's datagrams arrive, `from` is the
  /// peer), through a plain recv.
  detail::datagram_awaitable receive(void* buf, std::size_t len) noexcept {
    return {*m_ctx, m_desc, m_id, detail::datagram_op::receive, buf, len, &m_peer};
  }

  /// The bound address (its real port after binding port 0); empty when not open.
  endpoint local_endpoint() const noexcept;
  /// Closes the socket: pending operations end with error::cancelled, later ones at
  /// once likewise. Idempotent; thread-safe against the socket's operations.
  void close() noexcept;
  /// True while the socket is open.
  bool is_open() const noexcept { return m_desc != nullptr && !m_desc->closed(); }
  /// The socket's file descriptor, or -1; still owned by the socket.
  int native_handle() const noexcept { return is_open() ? m_desc->fd() : -1; }

 private:
  std::error_code open(int family) noexcept;

  uring_context* m_ctx;
  detail::descriptor* m_desc = nullptr;
  std::uint64_t m_id = 0;
  endpoint m_peer;  // connect()'s; set before operations start (connect is not thread-safe)
};

}  // namespace weft::io
