// weft/io/unix.hpp: Unix domain sockets of the io_uring backend: unix_endpoint,
// unix_stream, unix_listener, unix_datagram.
//
//   weft::io::unix_listener l(io);
//   if (auto ec = l.listen(weft::io::unix_endpoint::path("/run/app.sock"))) ...
//   auto [ec, conn] = co_await l.accept();                  // a unix_stream
//   auto cred = conn.peer_credentials();                    // {ec, pid, uid, gid}
//   auto [ec2, n] = co_await conn.read_some(buf, sizeof buf);
//
// unix_stream has every operation of tcp_stream but connect's address and TCP options
// (detail::basic_stream: read_some / write_some / write_all, their span and vectored
// forms, with_timeout, with_cancel, cancel, close), and unix_listener those of
// tcp_listener; unix_datagram those of udp_socket. Names are filesystem paths or, Linux
// only, abstract names (no file; gone with the last socket that holds them).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

#include "weft/io/tcp.hpp"
#include "weft/io/udp.hpp"
#include "weft/io/uring_context.hpp"

namespace weft::io {

/// The address of a Unix domain socket: a filesystem path, an abstract name, or
/// unnamed (a socket that was never bound: what a datagram from an unbound socket or a
/// socketpair's peer reports). A value type; thread-safe to read.
class unix_endpoint {
 public:
  /// An empty endpoint (no address); listen / connect / bind to it: invalid_argument.
  unix_endpoint() noexcept = default;
  /// The filesystem path `p`. Empty (see empty()) when `p` is empty, holds a NUL byte or
  /// is longer than max_length() bytes.
  static unix_endpoint path(std::string_view p) noexcept;
  /// The abstract name `name` (any bytes, NUL included; no file is made). Empty when
  /// longer than max_length() bytes.
  static unix_endpoint abstract(std::string_view name) noexcept;
  /// The endpoint of socket address `a` (`len` bytes, as the kernel gives it): empty
  /// unless it is an AF_UNIX address; unnamed for a length of 0 (what recvmsg reports
  /// for the source of a datagram from an unbound socket) or of the family alone.
  static unix_endpoint from(const sockaddr* a, socklen_t len) noexcept;
  /// The longest path or abstract name: 107 and 107 bytes (sun_path less a NUL or the
  /// abstract marker).
  static constexpr std::size_t max_length() noexcept { return sizeof(sockaddr_un::sun_path) - 1; }

  /// True for an endpoint with no address (default-constructed, or a bad name).
  bool empty() const noexcept { return m_len == 0; }
  /// True for an AF_UNIX address without a name (an unbound socket's).
  bool unnamed() const noexcept { return m_len == sizeof(sa_family_t); }
  /// True for an abstract name.
  bool is_abstract() const noexcept { return m_len > sizeof(sa_family_t) && m_addr.sun_path[0] == '\0'; }
  /// The path, or the abstract name without its marker; "" when empty or unnamed.
  std::string name() const;
  /// The path, "@name" for an abstract name, "(unnamed)" or "(empty endpoint)".
  std::string to_string() const;
  /// The socket address, for system calls.
  const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&m_addr); }
  /// Bytes of data() in use; 0 when empty.
  socklen_t size() const noexcept { return m_len; }

 private:
  sockaddr_un m_addr{};
  socklen_t m_len = 0;
};

/// The peer process of a unix_stream, as the kernel recorded it when the connection was
/// made (SO_PEERCRED). `ec` set (bad_file_descriptor without a socket): the ids are 0.
struct unix_credentials {
  std::error_code ec;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class unix_stream;

/// What unix_listener::accept() yields: {ec, stream}.
using unix_accept_result = basic_accept_result<unix_stream>;

/// A connected Unix stream socket of a uring_context: tcp_stream's rules (one read and
/// one write in flight at a time, cancel() from any thread, close() during another
/// thread's read, move-only, closes on destruction; the context outlives it). Its reads
/// and writes, shutdown, cancel, close and release are detail::basic_stream's.
class unix_stream : public detail::basic_stream {
 public:
  /// A stream with no socket yet (connect() makes one).
  explicit unix_stream(uring_context& ctx) noexcept : basic_stream(ctx) {}
  /// Adopts a connected Unix stream socket `fd` (closed by this stream).
  unix_stream(uring_context& ctx, int fd) noexcept : basic_stream(ctx, fd) {}
  /// Takes over `o`'s socket; `o` is left without one.
  unix_stream(unix_stream&& o) noexcept = default;
  /// Closes this stream's socket, if any (as close()), then takes over `o`'s.
  unix_stream& operator=(unix_stream&& o) noexcept {
    move_from(o);
    return *this;
  }
  ~unix_stream() = default;

  /// Connects to the listener at `to`: `std::error_code ec = co_await s.connect(ep)`.
  /// Errors: no_such_file_or_directory (no socket file at the path), connection_refused
  /// (nobody listens there), invalid_argument (empty endpoint), already_connected (the
  /// stream has a socket), timed_out under with_timeout.
  detail::connect_awaitable connect(const unix_endpoint& to) noexcept;
  /// Connects `a` and `b` (both without a socket, of any contexts) to each other
  /// (socketpair(2)): for talking to a child process or between two parts of one.
  /// Errors: already_connected, the system's.
  static std::error_code pair(unix_stream& a, unix_stream& b) noexcept;

  /// The peer's process id, user id and group id (SO_PEERCRED). Synchronous.
  unix_credentials peer_credentials() const noexcept;
  /// The peer's address (unnamed for a connecting client that did not bind); empty
  /// without a socket.
  unix_endpoint remote_endpoint() const noexcept;
  /// The socket's own address; empty without a socket.
  unix_endpoint local_endpoint() const noexcept;
};

/// How unix_listener::listen makes its socket. A plain value.
struct unix_listen_options {
  /// listen(2)'s backlog; also bounds the connections queued ahead of accept() (as
  /// tcp_listener::listen's).
  int backlog = SOMAXCONN;
  /// For a path: remove a socket file left at it (by a process that ended without
  /// removing it) before binding. Only a socket is removed: any other file there makes
  /// listen() fail with address_in_use. A socket some process still listens on is
  /// removed as well (that process keeps its connections but gets no new ones), so set
  /// this only where one instance runs at a time.
  bool remove_stale = false;
};

/// A listening Unix stream socket of a uring_context: tcp_listener's rules (accepts on
/// one ring, several awaiting at once from any threads, back-pressure at the backlog,
/// move-only, closes on destruction). A path's socket file is not removed by close():
/// remove it (std::filesystem::remove) when the service ends, or listen with
/// remove_stale.
class unix_listener : public detail::basic_listener {
 public:
  /// A listener of `ctx`, not listening yet (as tcp_listener's).
  explicit unix_listener(uring_context& ctx) noexcept : basic_listener(ctx) {}
  /// A listener whose accepts run on ring `ring` of `ctx`: an io_pool's worker index.
  /// Throws std::out_of_range when ring >= ctx.ring_count().
  unix_listener(uring_context& ctx, std::size_t ring) : basic_listener(ctx, ring, "unix_listener") {}
  /// Takes over `o`'s listening socket; `o` is left not listening.
  unix_listener(unix_listener&& o) noexcept = default;
  unix_listener& operator=(unix_listener&&) = delete;
  /// Closes the listener, if listening (as close()).
  ~unix_listener() = default;

  /// Binds to `at` and listens. Errors: address_in_use (a file at the path; see
  /// remove_stale, or the abstract name is taken), permission_denied,
  /// no_such_file_or_directory (the path's directory is missing), invalid_argument
  /// (empty or unnamed endpoint), already_connected (listening).
  std::error_code listen(const unix_endpoint& at, const unix_listen_options& o = {}) noexcept;
  /// The bound address.
  unix_endpoint local_endpoint() const noexcept;
  /// Waits for the next connection: {ec, stream} (as tcp_listener::accept).
  detail::accept_awaitable<unix_stream> accept() noexcept { return accept_as<unix_stream>(); }
};

/// What unix_datagram's receive_from / receive yield (basic_datagram_result's rules).
using unix_datagram_result = basic_datagram_result<unix_endpoint>;

/// A Unix datagram socket of a uring_context: udp_socket's rules (operations from any
/// thread, several at once; close() from any thread; move-only; the context outlives
/// it). The kernel neither reorders nor drops datagrams between Unix sockets: a send to
/// a receiver whose queue is full waits until it has room.
class unix_datagram : public detail::datagram_socket {
 public:
  /// A socket not open yet: bind(), connect() or pair() makes it.
  explicit unix_datagram(uring_context& ctx) noexcept : datagram_socket(ctx) {}
  /// Takes over `o`'s socket; `o` is left closed.
  unix_datagram(unix_datagram&& o) noexcept = default;
  unix_datagram& operator=(unix_datagram&&) = delete;
  ~unix_datagram() = default;

  /// Makes the socket and binds it to `at` (a sender that wants replies binds too).
  /// Errors: invalid_argument (empty or unnamed endpoint), address_in_use,
  /// already_connected (open).
  std::error_code bind(const unix_endpoint& at) noexcept;
  /// Sets the default peer (making the socket when not bound): send() / receive() then
  /// talk to it alone. Synchronous. Errors: invalid_argument, connection_refused,
  /// no_such_file_or_directory.
  std::error_code connect(const unix_endpoint& peer) noexcept;
  /// Makes `a` and `b` (both closed, of any contexts) a connected pair (socketpair(2)).
  static std::error_code pair(unix_datagram& a, unix_datagram& b) noexcept;

  /// Sends one datagram of `len` bytes to `to`: {ec, n}.
  detail::basic_datagram_awaitable<unix_endpoint> send_to(const void* buf, std::size_t len,
                                                          const unix_endpoint& to) noexcept;
  /// Receives one datagram into `buf` (see basic_datagram_result; `from` is unnamed
  /// when the sender is not bound).
  detail::basic_datagram_awaitable<unix_endpoint> receive_from(void* buf, std::size_t len) noexcept {
    return op<unix_endpoint>(detail::datagram_op::receive_from, buf, len, nullptr);
  }
  /// send_to(the connected peer). On a socket that is not connected: not_connected.
  detail::basic_datagram_awaitable<unix_endpoint> send(const void* buf, std::size_t len) noexcept {
    return op<unix_endpoint>(detail::datagram_op::send, const_cast<void*>(buf), len, &m_peer);
  }
  /// receive_from on a connected socket.
  detail::basic_datagram_awaitable<unix_endpoint> receive(void* buf, std::size_t len) noexcept {
    return op<unix_endpoint>(detail::datagram_op::receive, buf, len, &m_peer);
  }

  /// The bound address; empty when not open, unnamed when not bound.
  unix_endpoint local_endpoint() const noexcept;
};

}  // namespace weft::io
