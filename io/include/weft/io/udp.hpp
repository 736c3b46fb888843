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
  bool reuse_port = false;  ///< SO_REUSEPORT: several sockets (one per worker) on one port
  /// SO_REUSEADDR, on a given port only: binding to port 0 always gets a port no other
  /// socket has (Linux would hand one picked port to several SO_REUSEADDR sockets).
  bool reuse_address = true;
};

/// What receive_from / receive yield: `n` bytes stored of a datagram of `size` bytes
/// from `from` (receive: the connected peer). `ec`: empty; std::errc::message_size when
/// the datagram was larger than the buffer (`n` < `size`, the rest is lost); else the
/// failure (error::cancelled when stopped or closed), with n == size == 0. `Endpoint`:
/// weft::io::endpoint (udp_socket) or unix_endpoint (unix_datagram).
template <class Endpoint>
struct basic_datagram_result {
  std::error_code ec;
  std::size_t n = 0;
  std::size_t size = 0;
  Endpoint from;
};
/// What udp_socket's receive_from / receive yield.
using datagram_result = basic_datagram_result<endpoint>;

namespace detail {

/// Which datagram operation: sendmsg / recvmsg with an address, or (connected) a plain
/// send / recv, which need no msghdr.
enum class datagram_op : std::uint8_t { send_to, receive_from, send, receive };

/// A socket address by value (sockaddr_storage and its length).
struct socket_address {
  sockaddr_storage m_addr{};
  socklen_t m_len = 0;
  void set(const sockaddr* a, socklen_t len) noexcept;
};

/// send_to / receive_from / send / receive: one datagram operation on the ring.
class datagram_awaitable : public socket_awaitable {
 public:
  /// `peer`: send_to's destination; for send / receive the connected peer (what
  /// receive reports as `from`); null for receive_from.
  datagram_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, datagram_op what, void* buf, std::size_t len,
                     const socket_address* peer) noexcept;
  datagram_awaitable(datagram_awaitable&& o) noexcept;
  datagram_awaitable& operator=(datagram_awaitable&&) = delete;
  static constexpr bool k_linked_timeout_ok = true;  // weft::io::with_timeout applies
  /// A send is tried at once, with one non-blocking syscall: a datagram socket nearly
  /// always has room, and a send that completes here resumes the task at once (no SQE,
  /// no CQE). Only when the socket is full does it go to the ring (and a send whose stop
  /// was requested already goes there too, to end as a stopped one does).
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    point_at_self();  // here: the awaitable may have been moved since it was made
    if (!stop_requested(h) && try_send_now()) return false;
    return socket_awaitable::await_suspend(h);
  }

 protected:
  // The result but its source: ec, n, size (basic_datagram_result's rules); `from` is
  // set to the source's address (empty on failure).
  std::error_code finish(std::size_t& n, std::size_t& size, const sockaddr*& from, socklen_t& from_len) const noexcept;

 private:
  void point_at_self() noexcept;
  bool try_send_now() noexcept;

  datagram_op m_what;
  std::size_t m_len;
  socket_address m_peer;  // send_to: the destination; receive_from: the source, filled in; else the peer
  iovec m_iov{};
  msghdr m_msg{};
};

/// datagram_awaitable yielding a basic_datagram_result<Endpoint>.
template <class Endpoint>
class basic_datagram_awaitable : public datagram_awaitable {
 public:
  using datagram_awaitable::datagram_awaitable;
  basic_datagram_result<Endpoint> await_resume() const noexcept {
    basic_datagram_result<Endpoint> r;
    const sockaddr* from = nullptr;
    socklen_t len = 0;
    r.ec = finish(r.n, r.size, from, len);
    if (from != nullptr) r.from = Endpoint::from(from, len);
    return r;
  }
};

/// What udp_socket and unix_datagram have in common: the socket, its peer and close
/// (the types' comments say the rules). Not used alone.
class datagram_socket {
 public:
  /// Closes the socket: pending operations end with error::cancelled, later ones at
  /// once likewise. Idempotent; thread-safe against the socket's operations.
  void close() noexcept;
  /// True while the socket is open.
  bool is_open() const noexcept { return m_desc != nullptr && !m_desc->closed(); }
  /// The socket's file descriptor, or -1; still owned by the socket.
  int native_handle() const noexcept { return is_open() ? m_desc->fd() : -1; }

 protected:
  explicit datagram_socket(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  datagram_socket(datagram_socket&& o) noexcept;
  ~datagram_socket();
  // Makes the socket (SOCK_DGRAM of `family`); already_connected when open.
  std::error_code open(int family) noexcept;
  // Takes `fd` (a datagram socket) as the socket: false (fd closed) without memory.
  bool adopt(int fd) noexcept;
  // bind(2) of the open socket, closing it on failure.
  std::error_code bind_to(const sockaddr* a, socklen_t len) noexcept;
  // connect(2), making the socket of the peer's family first when not open; sets m_peer.
  std::error_code connect_to(const sockaddr* a, socklen_t len) noexcept;
  // getsockname into `out`; false when not open.
  bool local_address(socket_address& out) const noexcept;
  template <class Endpoint>
  basic_datagram_awaitable<Endpoint> op(datagram_op what, void* buf, std::size_t len,
                                        const socket_address* peer) noexcept {
    return {*m_ctx, m_desc, m_id, what, buf, len, peer};
  }

  uring_context* m_ctx;
  descriptor* m_desc = nullptr;
  std::uint64_t m_id = 0;
  socket_address m_peer;  // connect()'s; set before operations start (connect is not thread-safe)
};

}  // namespace detail

/// A UDP socket of a uring_context (either kind, as tcp_stream). Move-only; closes on
/// destruction. Operations may be awaited from any thread, several at once; close() may
/// be called from any thread at any time (pending operations end with
/// error::cancelled). The context must outlive it. close(), is_open() and
/// native_handle() are detail::datagram_socket's.
class udp_socket : public detail::datagram_socket {
 public:
  /// A socket not open yet: bind() or connect() makes it.
  explicit udp_socket(uring_context& ctx) noexcept : datagram_socket(ctx) {}
  /// Takes over `o`'s socket; `o` is left closed.
  udp_socket(udp_socket&& o) noexcept = default;
  udp_socket& operator=(udp_socket&&) = delete;
  ~udp_socket() = default;

  /// Makes the socket (the family of `at`) and binds it (port 0: a free port). Errors:
  /// invalid_argument (empty endpoint), address_in_use, already_connected (open).
  std::error_code bind(const endpoint& at, const udp_options& o = {}) noexcept;
  /// Sets the default peer (making the socket, of the peer's family, when not bound):
  /// send() / receive() then talk to it alone, and ICMP errors from it come back
  /// (connection_refused on a later operation). Synchronous. Errors: invalid_argument.
  std::error_code connect(const endpoint& peer) noexcept;

  /// Sends one datagram of `len` bytes to `to`: {ec, n}.
  detail::basic_datagram_awaitable<endpoint> send_to(const void* buf, std::size_t len, const endpoint& to) noexcept;
  /// Receives one datagram into `buf` (see datagram_result).
  detail::basic_datagram_awaitable<endpoint> receive_from(void* buf, std::size_t len) noexcept {
    return op<endpoint>(detail::datagram_op::receive_from, buf, len, nullptr);
  }
  /// send_to(the connected peer), through a plain send (no address to pass). On a socket
  /// that is not connected: destination_address_required.
  detail::basic_datagram_awaitable<endpoint> send(const void* buf, std::size_t len) noexcept {
    return op<endpoint>(detail::datagram_op::send, const_cast<void*>(buf), len, &m_peer);
  }
  /// receive_from on a connected socket (only the peer's datagrams arrive, `from` is the
  /// peer), through a plain recv.
  detail::basic_datagram_awaitable<endpoint> receive(void* buf, std::size_t len) noexcept {
    return op<endpoint>(detail::datagram_op::receive, buf, len, &m_peer);
  }

  /// The bound address (its real port after binding port 0); empty when not open.
  endpoint local_endpoint() const noexcept;
};

}  // namespace weft::io
