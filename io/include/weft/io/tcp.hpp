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
#include <sys/uio.h>

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

#include "weft/io/buffer.hpp"
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
  sockaddr_storage m_addr{};
  socklen_t m_len = 0;
};

class tcp_stream;

namespace detail {

class basic_stream;

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

/// True when this thread may complete one more operation at once (a datagram send with
/// room) rather than through the ring; false once in k_inline_budget (io/src/tcp.cpp), so
/// that a task that never has to wait still suspends now and then.
bool take_inline_budget() noexcept;

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
  // True when the stop that this operation would watch (with_cancel's token, else the
  // awaiting task's) was requested already: then it is not tried at once but submitted,
  // and ends as a stopped operation does.
  template <class Promise>
  bool stop_requested(std::coroutine_handle<Promise> h) const noexcept {
    if (m_watch.m_explicit) return m_watch.m_token.stop_requested();
    const std::stop_token* t = weft::detail::awaiting_token(h);
    return t != nullptr && t->stop_requested();
  }

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

/// connect: makes the socket (synchronously, of the address's family), then an io_uring
/// connect. For tcp_stream and unix_stream alike.
class connect_awaitable : public socket_awaitable {
 public:
  /// Connects `stream` to the `len` bytes of address `to` (`early`: the error to yield
  /// at once instead, from the caller's checks).
  connect_awaitable(uring_context& ctx, basic_stream& stream, const sockaddr* to, socklen_t len,
                    std::error_code early) noexcept;
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

  basic_stream* m_stream;
  sockaddr_storage m_to{};
  socklen_t m_to_len = 0;
  std::error_code m_early;
};

/// receive(): one receive into a buffer of the ring's pool (weft/io/buffer.hpp). With a
/// provided buffer ring, a recv that lets the kernel pick the buffer; else a poll for
/// readability, then a recv into a buffer taken then (again on a spurious wake-up).
class receive_awaitable : public socket_awaitable {
 public:
  receive_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket) noexcept;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    m_op.m_arg = this;  // here, not earlier: the awaitable may have been moved since
    return socket_awaitable::await_suspend(h);
  }
  receive_result await_resume() noexcept;

 private:
  static void prep(::io_uring_sqe* sqe, uring_op& op);
  static bool on_cqe(uring_op& op, int res, unsigned flags);
  static bool again(uring_op& op);

  buffer_pool* m_pool = nullptr;  // the ring's, once prepared there
  int m_res = 0;                  // bytes or -errno, once m_ran (m_op.m_res is the last CQE's)
  std::uint16_t m_id = 0;         // the buffer, when m_has_buffer
  bool m_has_buffer = false;
  bool m_ran = false;
  bool m_no_pool = false;  // the pool could not be made: a nop carries m_res
};

/// The vectored read_some / write_some: one recvmsg or sendmsg over the caller's buffers.
class vector_transfer_awaitable : public socket_awaitable {
 public:
  vector_transfer_awaitable(uring_context& ctx, bool send, descriptor* d, std::uint64_t socket, const iovec* bufs,
                            std::size_t count) noexcept;
  vector_transfer_awaitable(vector_transfer_awaitable&& o) noexcept;
  vector_transfer_awaitable& operator=(vector_transfer_awaitable&&) = delete;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    point_at_self();  // here: the awaitable may have been moved since it was made
    return socket_awaitable::await_suspend(h);
  }
  io_result await_resume() const noexcept;

 private:
  void point_at_self() noexcept;

  const iovec* m_bufs;
  std::size_t m_count;
  bool m_any = false;  // some buffer is not empty (a receive of 0 bytes then means eof)
  msghdr m_msg{};
};

/// The vectored write_all: sendmsg again after a partial send, on the loop thread, until
/// every buffer is sent. Works on its own copy of the buffer list (inline up to
/// k_inline entries, else allocated).
class vector_write_all_awaitable : public socket_awaitable {
 public:
  static constexpr std::size_t k_inline = 8;
  vector_write_all_awaitable(uring_context& ctx, descriptor* d, std::uint64_t socket, const iovec* bufs,
                             std::size_t count) noexcept;
  vector_write_all_awaitable(vector_write_all_awaitable&& o) noexcept;
  vector_write_all_awaitable& operator=(vector_write_all_awaitable&&) = delete;
  ~vector_write_all_awaitable();
  bool await_ready() const noexcept { return m_nomem || m_total == 0; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    point_at_self();  // here, not earlier: the awaitable may have been moved since
    return socket_awaitable::await_suspend(h);
  }
  io_result await_resume() const noexcept;

 private:
  void point_at_self() noexcept;
  iovec* list() noexcept { return m_heap != nullptr ? m_heap : m_inline; }
  static bool on_cqe(uring_op& op, int res, unsigned flags);

  iovec m_inline[k_inline]{};
  iovec* m_heap = nullptr;  // the copy when there are more than k_inline buffers
  std::size_t m_count = 0;
  std::size_t m_first = 0;  // the first buffer not sent in full
  std::size_t m_total = 0;
  std::size_t m_done = 0;
  bool m_nomem = false;    // no memory for the copy: yields not_enough_memory
  bool m_stopped = false;  // a stop ended it between two sends
  msghdr m_msg{};
};

struct listener_state;

}  // namespace detail

namespace detail {

/// What tcp_stream and unix_stream have in common: a connected stream socket of a
/// uring_context and its operations (the types' comments say the rules). Not used alone.
class basic_stream {
 public:
  /// Receives up to `len` bytes: {ec, n}; ec is error::eof when the peer closed its end,
  /// connection_reset when it reset the connection.
  transfer_awaitable read_some(void* buf, std::size_t len) noexcept {
    return {*m_ctx, op_kind::recv, m_desc, socket_id(), buf, len};
  }
  /// Sends up to `len` bytes (one send; never raises SIGPIPE): {ec, n}.
  transfer_awaitable write_some(const void* buf, std::size_t len) noexcept {
    return {*m_ctx, op_kind::send, m_desc, socket_id(), const_cast<void*>(buf), len};
  }
  /// Sends all `len` bytes (as many sends as it takes): {ec, bytes sent}.
  write_all_awaitable write_all(const void* buf, std::size_t len) noexcept {
    return {*m_ctx, m_desc, socket_id(), buf, len};
  }

  /// read_some into a span of any trivially copyable elements (`std::span(buf)` for an
  /// array, a std::vector or a std::string's data): up to buf.size_bytes() bytes. A
  /// span of iovec is a list of buffers (the vectored forms below), never bytes.
  template <class T, std::size_t N>
    requires(!std::is_const_v<T> && std::is_trivially_copyable_v<T> && !std::is_same_v<T, iovec>)
  transfer_awaitable read_some(std::span<T, N> buf) noexcept {
    return read_some(buf.data(), buf.size_bytes());
  }
  /// write_some from a span (as read_some's span form): up to buf.size_bytes() bytes.
  template <class T, std::size_t N>
    requires(std::is_trivially_copyable_v<T> && !std::is_same_v<std::remove_const_t<T>, iovec>)
  transfer_awaitable write_some(std::span<T, N> buf) noexcept {
    return write_some(buf.data(), buf.size_bytes());
  }
  /// write_all from a span: all buf.size_bytes() bytes.
  template <class T, std::size_t N>
    requires(std::is_trivially_copyable_v<T> && !std::is_same_v<std::remove_const_t<T>, iovec>)
  write_all_awaitable write_all(std::span<T, N> buf) noexcept {
    return write_all(buf.data(), buf.size_bytes());
  }

  /// Receives into a buffer of the ring's pool (weft/io/buffer.hpp), taken only once
  /// data has arrived, so a stream waiting here holds no buffer: {ec, buf}, `buf` the
  /// bytes (at most uring_options::buffer_size). ec: error::eof when the peer closed its
  /// end, std::errc::no_buffer_space when every buffer of the pool is leased (nothing
  /// was read: the data waits in the socket; give buffers back and receive again),
  /// not_enough_memory when the pool cannot be made; otherwise as read_some's.
  receive_awaitable receive() noexcept { return {*m_ctx, m_desc, socket_id()}; }
  /// Scatter read: one receive (recvmsg) into the buffers in order, {ec, n} as
  /// read_some's (error::eof at the end, when some buffer is not empty). The buffers and
  /// the array of them must stay alive until it ends. More than IOV_MAX buffers:
  /// invalid_argument (EMSGSIZE from the kernel).
  vector_transfer_awaitable read_some(std::span<const iovec> bufs) noexcept {
    return {*m_ctx, false, m_desc, socket_id(), bufs.data(), bufs.size()};
  }
  /// Gather write: one send (sendmsg, never SIGPIPE) of the buffers in order: {ec, n}.
  vector_transfer_awaitable write_some(std::span<const iovec> bufs) noexcept {
    return {*m_ctx, true, m_desc, socket_id(), bufs.data(), bufs.size()};
  }
  /// Gather write of every byte of the buffers, in order (as many sends as it takes,
  /// with a header and a body, say, in one send when the socket has room): {ec, bytes
  /// sent}. The array may be reused once this returns (it is copied: inline up to 8
  /// buffers, else allocated; no memory yields not_enough_memory, nothing sent); the
  /// buffers must stay alive until it ends.
  vector_write_all_awaitable write_all(std::span<const iovec> bufs) noexcept {
    return {*m_ctx, m_desc, socket_id(), bufs.data(), bufs.size()};
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

 protected:
  explicit basic_stream(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  basic_stream(uring_context& ctx, int fd) noexcept : m_ctx(&ctx) { adopt(fd); }
  basic_stream(basic_stream&& o) noexcept
      : m_ctx(o.m_ctx),
        m_fd(o.m_fd.exchange(-1, std::memory_order_relaxed)),
        m_id(o.m_id.load(std::memory_order_relaxed)),
        m_desc(std::exchange(o.m_desc, nullptr)) {}
  // Closes this stream's socket, if any (as close()), then takes over `o`'s socket and
  // context; `o` is left without a socket.
  void move_from(basic_stream& o) noexcept;
  ~basic_stream() {
    close();
    if (m_desc != nullptr) m_desc->drop_ref();
  }
  // connect(): a connect_awaitable to the `len` bytes of `to` (`early`: the caller's
  // check failed; yields it).
  connect_awaitable connect_to(const sockaddr* to, socklen_t len, std::error_code early) noexcept {
    return {*m_ctx, *this, to, len, early};
  }

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
  descriptor* m_desc = nullptr;
};

}  // namespace detail

/// A connected TCP socket of a uring_context. Move-only; closes on destruction. One
/// read and one write may be in flight at a time (from any threads); cancel() may be
/// called from any thread at any time, also while the owner closes or reconnects the
/// stream or moves another stream of the same context into it; the other member
/// functions must not race with each other. The context must outlive the stream.
/// Its reads and writes (plain, span and vectored), shutdown, cancel, close and
/// release are those of detail::basic_stream, above.
class tcp_stream : public detail::basic_stream {
 public:
  /// A stream with no socket yet (connect() makes one).
  explicit tcp_stream(uring_context& ctx) noexcept : basic_stream(ctx) {}
  /// Adopts a connected socket `fd` (closed by this stream).
  tcp_stream(uring_context& ctx, int fd) noexcept : basic_stream(ctx, fd) {}
  /// Takes over `o`'s socket (same context); `o` is left without one.
  tcp_stream(tcp_stream&& o) noexcept = default;
  /// Closes this stream's socket, if any (as close()), then takes over `o`'s socket and
  /// context; `o` is left without a socket.
  tcp_stream& operator=(tcp_stream&& o) noexcept {
    move_from(o);
    return *this;
  }
  /// Closes the socket, if any (as close()).
  ~tcp_stream() = default;

  /// Connects to `to`: `std::error_code ec = co_await s.connect(ep)`. Errors:
  /// connection_refused, invalid_argument (empty endpoint or port 0), already_connected
  /// (the stream has a socket), timed_out under with_timeout.
  detail::connect_awaitable connect(const endpoint& to) noexcept;
  /// Same, parsing a numeric address first; a bad address yields invalid_argument.
  detail::connect_awaitable connect(std::string_view address, std::uint16_t port);
  /// Resolves `host` (a name or a numeric address; weft::io::resolve, weft/io/resolve.hpp)
  /// and connects to its endpoints in the resolver's order until one accepts:
  /// `if (auto ec = co_await s.connect_host("db.internal", 5432)) ...`. Yields {} once
  /// connected, else the resolver's error or the last endpoint's connect error (a stop
  /// ends it with operation_canceled at once). From a weft task; defined with resolve.
  task<std::error_code> connect_host(std::string host, std::uint16_t port);

  /// Sets TCP_NODELAY. Synchronous.
  std::error_code set_no_delay(bool on) noexcept;
  /// The peer's address; empty without a socket or once the peer is gone.
  endpoint remote_endpoint() const noexcept;
  /// The socket's own address; empty without a socket.
  endpoint local_endpoint() const noexcept;
};

/// What a listener's accept() yields: `auto [ec, stream] = co_await listener.accept()`.
/// A plain value (no synchronization).
template <class Stream>
struct basic_accept_result {
  std::error_code ec;  ///< empty on success
  Stream stream;       ///< the connection; without a socket when `ec` is set
};
/// What tcp_listener::accept() yields.
using accept_result = basic_accept_result<tcp_stream>;

namespace detail {
/// Holds a reference to the listener's state (io/src/tcp.cpp), so that an accept()
/// handed to the listener's ring from another thread finds it alive, and closed, when
/// the listener was closed on its ring meanwhile.
class accept_awaitable_base : public uring_awaitable {
 public:
  // `closed`: the listener had been listening and was closed (st is null then).
  accept_awaitable_base(uring_context& ctx, listener_state* st, bool closed = false) noexcept;
  accept_awaitable_base(accept_awaitable_base&& o) noexcept;  // before it is awaited
  accept_awaitable_base& operator=(accept_awaitable_base&&) = delete;
  ~accept_awaitable_base();

 protected:
  // The failure (empty: m_op.m_res is the accepted socket's fd).
  std::error_code failure() const noexcept;

 private:
  listener_state* m_hold;
  bool m_after_close;  // accept() after close(): operation_canceled, as a pending one
};

/// accept() of a listener whose connections are `Stream`s.
template <class Stream>
class accept_awaitable : public accept_awaitable_base {
 public:
  using accept_awaitable_base::accept_awaitable_base;
  basic_accept_result<Stream> await_resume() const noexcept {
    if (auto ec = failure()) return {ec, Stream(*m_ctx)};
    Stream s(*m_ctx, m_op.m_res);
    if (!s.is_open()) return {std::make_error_code(std::errc::not_enough_memory), std::move(s)};  // closed it
    return {{}, std::move(s)};
  }
};

/// What tcp_listener and unix_listener have in common: the listening socket, its state
/// on one ring and its accepts (the types' comments say the rules). Not used alone.
class basic_listener {
 public:
  /// Stops listening: pending accepts end with operation_canceled, and so do accepts
  /// called later (until listen() again), so that an accept loop that stops on
  /// operation_canceled stops whether the close came during an accept or between two;
  /// queued connections are closed, the socket is closed once the loop let go of it.
  /// Idempotent.
  void close() noexcept;
  /// True while listening.
  bool is_open() const noexcept { return m_state != nullptr; }

 protected:
  explicit basic_listener(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  // Throws std::out_of_range when ring >= ctx.ring_count().
  basic_listener(uring_context& ctx, std::size_t ring, const char* type);
  basic_listener(basic_listener&& o) noexcept
      : m_ctx(o.m_ctx), m_ring(o.m_ring), m_state(std::exchange(o.m_state, nullptr)), m_closed(o.m_closed) {}
  ~basic_listener() { close(); }
  // Makes the listening socket: socket(family, SOCK_STREAM), `prepare(fd)` (options and
  // bind: an errno on failure), listen(backlog), and the ring state. Errors as listen().
  std::error_code open(int family, int backlog, int (*prepare)(int fd, const void* arg), const void* arg) noexcept;
  // The listening socket's fd, or -1.
  int fd() const noexcept;
  template <class Stream>
  accept_awaitable<Stream> accept_as() noexcept {
    return {*m_ctx, m_state, m_closed};
  }

 private:
  static constexpr std::size_t k_any_ring = static_cast<std::size_t>(-1);
  uring_context* m_ctx;
  std::size_t m_ring = k_any_ring;  // the ring index given to the constructor
  listener_state* m_state = nullptr;
  bool m_closed = false;  // closed after listening, not listening again since
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
class tcp_listener : public detail::basic_listener {
 public:
  /// A listener of `ctx`, not listening yet (listen() makes the socket). On an io_pool
  /// its accepts run on the ring of the worker that calls listen(), or worker 0's when
  /// listen() is called from another thread.
  explicit tcp_listener(uring_context& ctx) noexcept : basic_listener(ctx) {}
  /// A listener whose accepts run on ring `ring` of `ctx`: an io_pool's worker index.
  /// Throws std::out_of_range when ring >= ctx.ring_count().
  tcp_listener(uring_context& ctx, std::size_t ring) : basic_listener(ctx, ring, "tcp_listener") {}
  /// Takes over `o`'s listening socket; `o` is left not listening.
  tcp_listener(tcp_listener&& o) noexcept = default;
  tcp_listener& operator=(tcp_listener&&) = delete;
  /// Closes the listener, if listening (as close()).
  ~tcp_listener() = default;

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
  /// operation_canceled when the listener is closed, and an accept() after close()
  /// yields operation_canceled too; accept() before listen() yields bad_file_descriptor.
  detail::accept_awaitable<tcp_stream> accept() noexcept { return accept_as<tcp_stream>(); }
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
