// weft/io/tcp.hpp: TCP over the io_uring backend: endpoint, tcp_stream, tcp_listener.
//
//   weft::io::tcp_listener listener(ctx);
//   if (auto ec = listener.listen(weft::io::endpoint::loopback(0))) ...;
//   auto [ec, stream] = co_await listener.accept();
//   auto [ec2, n] = co_await stream.read_some(buf, sizeof buf);   // ec2 == error::eof at the end
//   co_await stream.write_all(buf, n);
//
// Every failure is a std::error_code in the result (system errors as
// std::system_category, EOF and timeouts as weft::io::error), never an exception.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "weft/io/cancel.hpp"
#include "weft/io/detail/descriptor.hpp"
#include "weft/io/error.hpp"
#include "weft/io/uring_context.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// An error_code and a byte count: `auto [ec, n] = co_await stream.read_some(...)`.
/// A plain value (no synchronization).
struct io_result {
  std::error_code ec;  ///< empty on success
  std::size_t n = 0;   ///< bytes transferred (also on some errors: write_all's partial count)
};

/// An IPv4 or IPv6 address and port. A value type; thread-safe to read.
class endpoint {
 public:
  /// An empty endpoint (family AF_UNSPEC); connecting to it fails with invalid_argument.
  endpoint() noexcept = default;
  /// 127.0.0.1:port.
  static endpoint loopback(std::uint16_t port) noexcept;
  /// Parses a numeric address ("127.0.0.1", "::1", no names). An address that does not
  /// parse sets `ec` to std::errc::invalid_argument and returns an empty endpoint.
  static endpoint parse(std::string_view address, std::uint16_t port, std::error_code& ec);

  /// True for an endpoint with no address (default-constructed or failed to parse).
  bool empty() const noexcept { return m_len == 0; }
  /// The port in host byte order; 0 for an empty endpoint.
  std::uint16_t port() const noexcept;
  /// "127.0.0.1:8080" or "[::1]:8080" ("(empty endpoint)" when empty).
  std::string to_string() const;
  /// The socket address, for system calls (sockaddr_in or sockaddr_in6).
  const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&m_addr); }
  /// The endpoint of socket address `a` (`len` bytes): empty unless it is an IPv4 or
  /// IPv6 address that fits.
  static endpoint from(const sockaddr* a, socklen_t len) noexcept;
  /// The socket address storage, for system calls that fill it (then resize()).
  sockaddr* data() noexcept { return reinterpret_cast<sockaddr*>(&m_addr); }
  /// Bytes of data() in use; 0 when empty.
  socklen_t size() const noexcept { return m_len; }

 private:
  friend class tcp_listener;  // local_endpoint() sets the length after the kernel filled data()
  void resize(socklen_t n) noexcept { m_len = n; }

  sockaddr_storage m_addr{};
  socklen_t m_len = 0;
};

class tcp_stream;

namespace detail {

/// The result of a ring operation that yields a byte count; `closed`: its socket was
/// closed locally meanwhile (then anything but data is error::cancelled).
io_result byte_result(const uring_op& op, bool zero_is_eof, bool closed = false) noexcept;
/// The error_code of a ring operation that yields nothing else.
std::error_code status_result(const uring_op& op) noexcept;
/// A new socket identity (never 0, never reused in the process): what tcp_stream::cancel
/// names its target by, since a closed socket's fd number is soon another socket's.
std::uint64_t new_socket_id() noexcept;
/// Cancels what is in flight on fd `fd` of object `id` (a socket's identity) on every
/// ring of `ctx` (uring_impl::cancel_socket: nothing where the number is another's now).
/// Throws std::bad_alloc (a call to hand to another thread's ring).
void cancel_everywhere(uring_context& ctx, int fd, std::uint64_t id);
/// close() of an object whose operations a shutdown does not end (a signalfd, a UDP
/// socket): marks `d` closed (no operation begins after this), then cancels those in
/// flight by fd and identity; the number stays open until they ended. Null or closed
/// already: nothing. Never throws (no memory for a cancel to another ring: that
/// operation ends by its stop token or its own completion).
void close_and_cancel(uring_context& ctx, descriptor* d, std::uint64_t id) noexcept;

/// An operation on a socket: holds the socket's descriptor (weft/io/detail/descriptor.hpp),
/// so that its fd number stays open until the operation ended, and an operation awaited
/// after its socket was closed (or moved over) ends at once without reaching the kernel.
class socket_awaitable : public uring_awaitable {
 public:
  socket_awaitable(uring_context& ctx, descriptor* d) noexcept : uring_awaitable(ctx), m_desc(d) {}
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (const int err = m_desc.begin(); err != 0) {  // closed, or no socket: never submitted
      m_op.m_res = -err;
      return false;
    }
    return uring_awaitable::await_suspend(h);
  }

 protected:
  descriptor_ref m_desc;
};

/// read_some / write_some: one recv or send.
class transfer_awaitable : public socket_awaitable {
 public:
  transfer_awaitable(uring_context& ctx, op_kind kind, descriptor* d, std::uint64_t socket, void* buf,
                     std::size_t len) noexcept;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  io_result await_resume() const noexcept {
    return byte_result(m_op, m_op.m_kind == op_kind::recv && m_op.m_len > 0, m_desc.closed());
  }
};

/// write_all: sends again after a partial send, on the loop thread, until all is sent.
class write_all_awaitable : public socket_awaitable {
 public:
  write_all_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket, const void* buf,
                      std::size_t len) noexcept;
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    m_op.m_arg = this;  // here, not earlier: the awaitable may have been moved since
    return socket_awaitable::await_suspend(h);
  }
  io_result await_resume() const noexcept;

 private:
  static bool on_cqe(uring_op& op, int res, unsigned flags);
  std::size_t m_total;
  std::size_t m_done = 0;
  bool m_stopped = false;  // a stop ended it between two sends
};

/// connect: makes the socket (synchronously), then an io_uring connect.
class connect_awaitable : public socket_awaitable {
 public:
  connect_awaitable(uring_context& ctx, tcp_stream& stream, const endpoint& to, std::error_code early) noexcept;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  bool await_ready() const noexcept { return static_cast<bool>(m_early); }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (!open_socket()) return false;  // m_early says why
    return socket_awaitable::await_suspend(h);
  }
  std::error_code await_resume() const noexcept;

 private:
  bool open_socket();  // makes the socket and fills in the operation

  tcp_stream* m_stream;
  endpoint m_to;
  std::error_code m_early;
};

struct listener_state;

}  // namespace detail

/// A connected TCP socket of a uring_context. Move-only; closes on destruction. One
/// read and one write may be in flight at a time (from any threads); cancel() may be
/// called from any thread at any time, also while the owner closes or reconnects the
/// stream or moves another stream of the same context into it; the other member
/// functions must not race with each other. The context must outlive the stream.
class tcp_stream {
 public:
  /// A stream with no socket yet (connect() makes one).
  explicit tcp_stream(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  /// Adopts a connected socket `fd` (closed by this stream).
  tcp_stream(uring_context& ctx, int fd) noexcept : m_ctx(&ctx) { adopt(fd); }
  /// Takes over `o`'s socket (same context); `o` is left without one.
  tcp_stream(tcp_stream&& o) noexcept
      : m_ctx(o.m_ctx),
        m_fd(o.m_fd.exchange(-1, std::memory_order_relaxed)),
        m_id(o.m_id.load(std::memory_order_relaxed)),
        m_desc(std::exchange(o.m_desc, nullptr)) {}
  /// Closes this stream's socket, if any (as close()), then takes over `o`'s socket and
  /// context; `o` is left without a socket.
  tcp_stream& operator=(tcp_stream&& o) noexcept;
  /// Closes the socket, if any (as close()).
  ~tcp_stream() {
    close();
    if (m_desc != nullptr) m_desc->drop_ref();
  }

  /// Connects to `to`: `std::error_code ec = co_await s.connect(ep)`. Errors:
  /// connection_refused, invalid_argument (empty endpoint or port 0), already_connected
  /// (the stream has a socket), timed_out under with_timeout.
  detail::connect_awaitable connect(const endpoint& to);
  /// Same, parsing a numeric address first; a bad address yields invalid_argument.
  detail::connect_awaitable connect(std::string_view address, std::uint16_t port);
  /// Resolves `host` (a name or a numeric address; weft::io::resolve, weft/io/resolve.hpp)
  /// and connects to its endpoints in the resolver's order until one accepts:
  /// `if (auto ec = co_await s.connect_host("db.internal", 5432)) ...`. Yields {} once
  /// connected, else the resolver's error or the last endpoint's connect error (a stop
  /// ends it with operation_canceled at once). From a weft task; defined with resolve.
  task<std::error_code> connect_host(std::string host, std::uint16_t port);

  /// Receives up to `len` bytes: {ec, n}; ec is error::eof when the peer closed its end,
  /// connection_reset when it reset the connection.
  detail::transfer_awaitable read_some(void* buf, std::size_t len) noexcept {
    return {*m_ctx, detail::op_kind::recv, m_desc, socket_id(), buf, len};
  }
  /// Sends up to `len` bytes (one send; never raises SIGPIPE): {ec, n}.
  detail::transfer_awaitable write_some(const void* buf, std::size_t len) noexcept {
    return {*m_ctx, detail::op_kind::send, m_desc, socket_id(), const_cast<void*>(buf), len};
  }
  /// Sends all `len` bytes (as many sends as it takes): {ec, bytes sent}.
  detail::write_all_awaitable write_all(const void* buf, std::size_t len) noexcept {
    return {*m_ctx, m_desc, socket_id(), buf, len};
  }

  /// read_some into a span of any trivially copyable elements (`std::span(buf)` for an
  /// array, a std::vector or a std::string's data): up to buf.size_bytes() bytes.
  template <class T, std::size_t N>
    requires(!std::is_const_v<T> && std::is_trivially_copyable_v<T>)
  detail::transfer_awaitable read_some(std::span<T, N> buf) noexcept {
    return read_some(buf.data(), buf.size_bytes());
  }
  /// write_some from a span (as read_some's span form): up to buf.size_bytes() bytes.
  template <class T, std::size_t N>
    requires std::is_trivially_copyable_v<T>
  detail::transfer_awaitable write_some(std::span<T, N> buf) noexcept {
    return write_some(buf.data(), buf.size_bytes());
  }
  /// write_all from a span: all buf.size_bytes() bytes.
  template <class T, std::size_t N>
    requires std::is_trivially_copyable_v<T>
  detail::write_all_awaitable write_all(std::span<T, N> buf) noexcept {
    return write_all(buf.data(), buf.size_bytes());
  }

  /// shutdown(2): SHUT_RD, SHUT_WR or SHUT_RDWR. Synchronous; bad_file_descriptor when
  /// the stream has no socket.
  std::error_code shutdown(int how = SHUT_RDWR) noexcept;
  /// Cancels the operations in flight on this stream's socket (they end with
  /// std::errc::operation_canceled). Thread-safe, also against close(), a move or
  /// connect() on the owner's thread: the request names the socket, not its fd number,
  /// so it never reaches another socket that got the same number after this one was
  /// closed (it then does nothing). Asynchronous (handed to the loop).
  /// Needs Linux 5.19 (IORING_ASYNC_CANCEL_FD): on older kernels it has no effect.
  void cancel();
  /// Closes the socket. Operations in flight on it, and those created before and awaited
  /// after, end with error::cancelled (as on the Asio backend; a transfer that moved
  /// bytes first reports them): the socket is shut down at once, and its fd number is
  /// closed only once no operation of it can reach the kernel any more, so a read or
  /// write never lands on another socket that reuses the number. Idempotent; may be
  /// called while another thread's read or write on this stream is in flight (a duplex
  /// handler), not while another member function runs. Synchronous.
  void close() noexcept;
  /// Sets TCP_NODELAY. Synchronous.
  std::error_code set_no_delay(bool on) noexcept;

  /// True while the stream has a socket.
  bool is_open() const noexcept { return native_handle() >= 0; }
  /// The socket's file descriptor, or -1; still owned by the stream.
  int native_handle() const noexcept { return m_fd.load(std::memory_order_relaxed); }
  /// The uring_context its operations run on.
  uring_context& context() const noexcept { return *m_ctx; }
  /// Gives the socket up without closing it: returns its fd (-1 without one), which the
  /// caller now owns; the stream is left without a socket, and operations created before
  /// and awaited after end with error::cancelled. Must not race with operations in
  /// flight on it.
  int release() noexcept;

 private:
  friend class detail::connect_awaitable;  // makes the socket it connects
  // Takes the socket `fd` (-1: none) under a new socket identity and descriptor; false
  // (fd closed, the stream left without a socket) when the descriptor cannot be made.
  bool adopt(int fd) noexcept;
  // The identity of the socket it holds (0 without one).
  std::uint64_t socket_id() const noexcept { return m_id.load(std::memory_order_relaxed); }

  uring_context* m_ctx;
  // Atomic only for cancel() from other threads, which reads both (relaxed: a pair read
  // across a change still names one socket or none, see uring_impl::cancel_socket).
  std::atomic<int> m_fd{-1};
  std::atomic<std::uint64_t> m_id{0};
  // The socket's owner, shared with its operations; kept through close() (operations
  // created on other threads meanwhile still find it, closed), replaced by adopt() and
  // move assignment, dropped by the destructor.
  detail::descriptor* m_desc = nullptr;
};

/// What tcp_listener::accept() yields: `auto [ec, stream] = co_await listener.accept()`.
/// A plain value (no synchronization).
struct accept_result {
  std::error_code ec;  ///< empty on success
  tcp_stream stream;   ///< the connection; without a socket when `ec` is set
};

namespace detail {
/// Holds a reference to the listener's state (io/src/tcp.cpp), so that an accept()
/// handed to the listener's ring from another thread finds it alive, and closed, when
/// the listener was closed on its ring meanwhile.
class accept_awaitable : public uring_awaitable {
 public:
  accept_awaitable(uring_context& ctx, listener_state* st) noexcept;
  accept_awaitable(accept_awaitable&& o) noexcept;  // before it is awaited
  accept_awaitable& operator=(accept_awaitable&&) = delete;
  ~accept_awaitable();
  accept_result await_resume() const noexcept;

 private:
  listener_state* m_hold;
};
}  // namespace detail

/// How tcp_listener::listen makes its socket. A plain value.
struct listen_options {
  /// listen(2)'s backlog; also bounds the connections queued ahead of accept() (see
  /// tcp_listener::listen).
  int backlog = SOMAXCONN;
  /// SO_REUSEPORT: several listeners (one per context or thread) may bind the same
  /// address and port, and the kernel spreads new connections over them. Every
  /// listener of the group must set it.
  bool reuse_port = false;
};

/// A listening TCP socket of a uring_context. Its accepts run on one ring: the context's,
/// or on an io_pool the ring of the worker given to the constructor (then a task of the
/// pool that awaits accept() resumes on that worker). For a service on every worker of
/// an io_pool, make one listener per worker with listen_options::reuse_port and run one
/// accept loop on each (README.md, "A service on every core").
/// Accepts with one multishot accept where
/// the kernel has it (uring_context::has_multishot_accept: one SQE serves every
/// connection; connections that arrive with nobody waiting are queued, see listen()),
/// else one accept per call. Move-only; closes on
/// destruction. accept() may be awaited from several tasks at once, on any threads;
/// listen() and close() must not race with other member calls (calling accept() counts;
/// an accept already pending does not). The context must outlive it.
class tcp_listener {
 public:
  /// A listener of `ctx`, not listening yet (listen() makes the socket). On an io_pool
  /// its accepts run on the ring of the worker that calls listen(), or worker 0's when
  /// listen() is called from another thread.
  explicit tcp_listener(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  /// A listener whose accepts run on ring `ring` of `ctx`: an io_pool's worker index.
  /// Throws std::out_of_range when ring >= ctx.ring_count().
  tcp_listener(uring_context& ctx, std::size_t ring);
  /// Takes over `o`'s listening socket; `o` is left not listening.
  tcp_listener(tcp_listener&& o) noexcept
      : m_ctx(o.m_ctx), m_ring(o.m_ring), m_state(std::exchange(o.m_state, nullptr)) {}
  tcp_listener& operator=(tcp_listener&&) = delete;
  /// Closes the listener, if listening (as close()).
  ~tcp_listener() { close(); }

  /// Binds to `at` (SO_REUSEADDR; port 0 picks a free port) and listens with listen(2)'s
  /// `backlog`. Back-pressure: once `backlog` connections (at least 1) are queued here
  /// with nobody calling accept(), the listener stops accepting until accept() calls
  /// have taken them all, and later clients wait in the kernel's listen queue. The
  /// kernel may already have accepted one more batch (at most its listen queue, itself
  /// at most backlog + 1): those are kept, never dropped, so a listener holds at most
  /// 2 * backlog + 1 connections ahead of accept(). Errors: address_in_use,
  /// invalid_argument (empty endpoint), already_connected (listening).
  std::error_code listen(const endpoint& at, int backlog = SOMAXCONN) noexcept {
    return listen(at, listen_options{.backlog = backlog});
  }
  /// listen(at, o.backlog), with SO_REUSEPORT when o.reuse_port (see listen_options).
  std::error_code listen(const endpoint& at, const listen_options& o) noexcept;
  /// The bound address (its real port after listening on port 0).
  endpoint local_endpoint() const noexcept;
  /// Waits for the next connection: {ec, stream}. A pending accept ends with
  /// operation_canceled when the listener is closed; accept() before listen() or after
  /// close() yields bad_file_descriptor.
  detail::accept_awaitable accept() noexcept { return {*m_ctx, m_state}; }
  /// Stops listening: pending accepts end with operation_canceled, queued connections
  /// are closed, the socket is closed once the loop let go of it. Idempotent.
  void close() noexcept;

 private:
  static constexpr std::size_t k_any_ring = static_cast<std::size_t>(-1);
  uring_context* m_ctx;
  std::size_t m_ring = k_any_ring;  // the ring index given to the constructor
  detail::listener_state* m_state = nullptr;
};

/// Runs a ring operation (read_some, write_some, connect) for at most `d`: then it is
/// cancelled and yields error::timed_out (== std::errc::timed_out). Uses an io_uring
/// linked timeout: no extra thread, no extra submission.
/// `a` must be an rvalue (the operation as made, or std::move of a named one): it is
/// moved into the result, so an lvalue does not compile rather than being emptied
/// unseen. The result is awaitable from any thread, like `a`. Not weft::with_timeout
/// (weft/timeout.hpp, a timeout_result{ec, value}): qualify the call where both
/// namespaces are imported (unqualified, it is ambiguous).
template <class Awaitable, class Rep, class Period>
  requires(!std::is_lvalue_reference_v<Awaitable> && std::remove_cvref_t<Awaitable>::k_linked_timeout_ok)
std::remove_cvref_t<Awaitable> with_timeout(Awaitable&& a, std::chrono::duration<Rep, Period> d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  detail::uring_op& op = detail::awaitable_access::op(a);
  op.m_link_timeout = true;
  op.m_ts[0] = ns <= 0 ? 0 : ns / 1'000'000'000;
  op.m_ts[1] = ns <= 0 ? 1 : ns % 1'000'000'000;
  return std::move(a);
}

/// Runs a ring operation (any of this file's and weft/io/sleep.hpp's: read_some,
/// write_some, write_all, connect, accept, sleep_for/sleep_until, also one under
/// with_timeout) until it completes or a stop is requested on `token` (from any thread,
/// also before it starts), watching `token` instead of the awaiting task's own
/// (weft/stop.hpp); a cancelled operation yields std::errc::operation_canceled.
/// Cancellation is best effort: an operation the kernel already finished keeps its
/// result (write_all: the bytes sent so far are reported). `a` must be an rvalue, as for
/// with_timeout (it is moved into the result); the result is awaitable from any thread,
/// like `a`, and the task resumes on the executor it awaited from.
template <class Awaitable>
  requires(!std::is_lvalue_reference_v<Awaitable> &&
           std::derived_from<std::remove_cvref_t<Awaitable>, detail::uring_awaitable>)
std::remove_cvref_t<Awaitable> with_cancel(Awaitable&& a, std::stop_token token) {
  detail::awaitable_access::watch(a, std::move(token));
  return std::move(a);
}

/// with_cancel(a, source.get_token()).
template <class Awaitable>
  requires(!std::is_lvalue_reference_v<Awaitable> &&
           std::derived_from<std::remove_cvref_t<Awaitable>, detail::uring_awaitable>)
std::remove_cvref_t<Awaitable> with_cancel(Awaitable&& a, const cancel_source& source) {
  return with_cancel(std::move(a), source.get_token());
}

}  // namespace weft::io
