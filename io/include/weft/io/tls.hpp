// weft/io/tls.hpp: TLS over any weft stream (tcp_stream, unix_stream): tls_context and
// tls_stream<Stream>. Component weft::tls (OpenSSL 3); nothing else in weft needs it.
//
//   auto ctx = weft::io::tls_context::server();
//   ctx.use_certificate_chain_file("cert.pem"); ctx.use_private_key_file("key.pem");
//   weft::io::tls_stream tls(std::move(conn), ctx);          // conn: an accepted tcp_stream
//   if (auto ec = co_await tls.handshake()) ...
//   auto [ec, n] = co_await tls.read_some(buf, sizeof buf);     // error::eof after close_notify
//   co_await tls.write_all(reply.data(), reply.size());
//   co_await tls.shutdown();
//
// OpenSSL runs over two memory BIOs: it never touches the socket. The encrypted bytes go
// through the stream's own operations, on the ring of the worker the task runs on, so a
// connection's task may move between io_pool workers and nothing blocks or needs a
// thread. Every operation takes the awaiting task's stop token (through the stream's
// operations) and weft::with_timeout. Failures are std::error_code values: the stream's
// own (connection_reset, error::cancelled, ...) or codes of tls_category() (compare them
// with the tls_errc conditions), never exceptions from a read or write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/io/error.hpp"
#include "weft/io/tcp.hpp"
#include "weft/mutex.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// What a TLS failure is, as error conditions: `if (ec == tls_errc::verification_failed)`.
/// The error codes themselves (tls_category()) carry OpenSSL's reason in their message().
enum class tls_errc {
  handshake_failed = 1,     ///< the handshake did not complete (any reason; also == the others below that end one)
  verification_failed = 2,  ///< the peer's certificate was refused (expired, self-signed, wrong host name, ...)
  protocol_error =
      3,          ///< the peer broke the protocol (a bad record, a renegotiation); also == std::errc::protocol_error
  truncated = 4,  ///< the connection ended without the peer's close_notify (data may be missing)
  not_established = 5,  ///< read or write before a successful handshake, or after a failure
};

/// The category of weft's TLS error codes ("weft.tls"). Thread-safe.
const std::error_category& tls_category() noexcept;
/// An error_condition of tls_category(): what `ec == tls_errc::x` compares with.
inline std::error_condition make_error_condition(tls_errc e) noexcept { return {static_cast<int>(e), tls_category()}; }
/// An error_code of tls_category() with no further reason.
inline std::error_code make_error_code(tls_errc e) noexcept { return {static_cast<int>(e), tls_category()}; }

/// Which end a tls_context serves.
enum class tls_role { client, server };
/// The lowest protocol version a tls_context accepts.
enum class tls_version { tls1_2, tls1_3 };

namespace detail {
struct tls_context_state;
class tls_session;
}  // namespace detail

/// The settings shared by many TLS streams: role, certificates, trust, versions, ALPN,
/// server names, session resumption. A handle: copies share one OpenSSL SSL_CTX. Set it
/// up before the first stream is made with it, from one thread; afterwards streams may
/// be made from any thread at once (it is then read-only, but for its session cache).
/// Setters report a bad certificate, key or file as a std::error_code of
/// std::system_category (a file that cannot be opened) or tls_category() (OpenSSL's
/// reason), and leave the setting as it was.
class tls_context {
 public:
  /// A client context: the peer's certificate is verified against the system's CA bundle
  /// (load_verify_file / add_certificate_authority add others; use_default_verify_paths
  /// is already done), its host name is checked against the name each stream is given,
  /// TLS 1.2 at least, and sessions are resumed (the last session per server name is
  /// kept). Throws std::bad_alloc, std::system_error when OpenSSL cannot make a context.
  static tls_context client();
  /// A server context: give it a certificate chain and its key; TLS 1.2 at least,
  /// session tickets on, client certificates not asked for. Throws as client().
  static tls_context server();

  /// The PEM certificate chain (leaf first) from a file / from memory.
  std::error_code use_certificate_chain_file(const std::string& path);
  std::error_code use_certificate_chain(std::string_view pem);
  /// The PEM private key of the leaf certificate (checked against it when both are set).
  std::error_code use_private_key_file(const std::string& path);
  std::error_code use_private_key(std::string_view pem);
  /// Trusts the CA certificates of a PEM file / of PEM text (for verifying the peer).
  std::error_code load_verify_file(const std::string& path);
  std::error_code add_certificate_authority(std::string_view pem);
  /// Trusts the system's CA bundle (a client context does from the start).
  std::error_code use_default_verify_paths();
  /// Whether the peer must present a certificate that verifies: on by default for a
  /// client (off only for tests against self-signed servers); off by default for a
  /// server (on: a client without a verified certificate fails the handshake).
  void set_verify_peer(bool on);
  /// The lowest version accepted (TLS 1.2 unless set; nothing older is ever accepted).
  std::error_code set_min_version(tls_version v);
  /// ALPN: a client offers `protocols` in this order; a server picks the first of its
  /// `protocols` that the client offered (none in common: no protocol, the handshake
  /// goes on). Each 1 to 255 bytes, else invalid_argument.
  std::error_code set_alpn(const std::vector<std::string>& protocols);
  /// A server's certificate for clients that ask for server name `name` (SNI); other
  /// names, and clients that send none, get the default chain. Exact, case-insensitive.
  std::error_code add_server_name(const std::string& name, std::string_view chain_pem, std::string_view key_pem);
  /// Session resumption (a server's tickets, a client's per-name cache): on by default.
  void set_session_resumption(bool on);

  /// client or server.
  tls_role role() const noexcept;
  /// The SSL_CTX*, for settings this class does not have (before the first stream).
  void* native_handle() const noexcept;

 private:
  friend class detail::tls_session;
  explicit tls_context(std::shared_ptr<detail::tls_context_state> s) noexcept : m_state(std::move(s)) {}
  std::shared_ptr<detail::tls_context_state> m_state;
};

/// A PEM certificate and its PEM private key.
struct tls_certificate {
  std::string chain_pem;
  std::string key_pem;
};

/// Makes a self-signed certificate (EC P-256, SHA-256) for `names` (DNS names, or IP
/// addresses such as "127.0.0.1", as subjectAltNames; the first is the subject's CN),
/// valid from now for `days` (negative: one that expired that long ago). For tests and
/// development servers; a client trusts it with add_certificate_authority(chain_pem).
/// `issuer`: sign with that certificate's key instead (a CA made by this function), so
/// that a client trusting the issuer trusts the result. Throws std::invalid_argument
/// (no names), std::system_error (OpenSSL failed).
tls_certificate make_self_signed_certificate(const std::vector<std::string>& names, int days = 30,
                                             const tls_certificate* issuer = nullptr);

namespace detail {

/// One connection's OpenSSL state over memory BIOs (not API). Every call locks it, so a
/// reader and a writer on different threads may use it at once.
class tls_session {
 public:
  enum class step : std::uint8_t { done, want_read, closed, failed };

  tls_session(const tls_context& ctx, std::string_view server_name);
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;
  ~tls_session();

  step handshake();
  /// One SSL_read: `n` bytes stored (done), want_read, closed (close_notify), failed.
  step read(void* buf, std::size_t len, std::size_t& n);
  /// One SSL_write of up to `len` bytes (n: accepted; their records are in the output).
  step write(const void* buf, std::size_t len, std::size_t& n);
  /// SSL_shutdown: done once both close_notify went and came, want_read before.
  step shutdown();
  /// Ciphertext from the peer.
  void feed(const char* data, std::size_t n);
  /// Takes up to `cap` bytes of ciphertext to send; 0 when there is none.
  std::size_t drain(char* out, std::size_t cap);
  /// The failure of the last step that failed.
  std::error_code error() const;
  /// The negotiated ALPN protocol ("" when none).
  std::string alpn() const;
  /// The peer certificate's subject (RFC 2253 form), "" when it sent none.
  std::string peer_subject() const;
  bool established() const;
  bool resumed() const;
  /// True when ciphertext waits to be sent (drain()).
  bool has_output() const { return pending_output() > 0; }
  /// Bytes of ciphertext waiting to be sent.
  std::size_t pending_output() const;
  void* native_handle() const noexcept { return m_ssl; }
  /// The peer's end came without close_notify: the handshake or read fails as truncated.
  void mark_truncated();

 private:
  step finish(int r, bool handshaking);  // maps SSL_get_error; under m_lock

  mutable std::mutex m_lock;
  std::shared_ptr<tls_context_state> m_context;  // kept alive: OpenSSL's callbacks use it
  std::string m_name;                            // the server name a client checks (the session cache's key)
  void* m_ssl = nullptr;                         // SSL*
  void* m_in = nullptr;                          // BIO*: ciphertext from the peer
  void* m_out = nullptr;                         // BIO*: ciphertext for the peer
  std::error_code m_error;
  bool m_established = false;
};

}  // namespace detail

/// TLS over `Stream` (tcp_stream, unix_stream, or any type with read_some / write_all
/// awaitables yielding io_result, and close() / cancel()). Owns the stream. One read and
/// one write may be in flight at once, from any tasks (a duplex handler); handshake()
/// and shutdown() run alone. Movable while no operation is in flight.
template <class Stream>
class tls_stream {
 public:
  /// Wraps `next` (connected). A client context checks the peer's certificate against
  /// `server_name` (a DNS name or an IP address; also sent as SNI unless an address):
  /// give the name the client connected to. Throws std::bad_alloc, std::system_error
  /// when OpenSSL cannot make the connection's state.
  tls_stream(Stream next, const tls_context& ctx, std::string_view server_name = {})
      : m_next(std::move(next)),
        m_session(std::make_unique<detail::tls_session>(ctx, server_name)),
        m_send(std::make_unique<weft::mutex>()),
        m_in(std::make_unique<char[]>(k_small)),
        m_out(std::make_unique<char[]>(k_small)) {}
  tls_stream(tls_stream&&) noexcept = default;
  tls_stream& operator=(tls_stream&&) noexcept = default;
  ~tls_stream() = default;

  /// Runs the handshake: {} once established; else the stream's error (a timeout, a
  /// reset, error::cancelled) or a tls_category() code (== tls_errc::handshake_failed;
  /// also == verification_failed when the certificate was refused, == truncated when
  /// the peer closed). From a weft task.
  task<std::error_code> handshake() {
    for (;;) {
      const auto st = m_session->handshake();
      if (auto ec = co_await flush()) co_return ec;  // also the alert of a failure
      if (st == step::done) co_return std::error_code{};
      if (st != step::want_read) co_return m_session->error();
      if (auto ec = co_await fill()) co_return ec;
    }
  }

  /// Decrypts up to `len` bytes: {ec, n}. error::eof once the peer sent close_notify;
  /// tls_errc::truncated when its end came without one; the stream's errors. From a weft task.
  task<io_result> read_some(void* buf, std::size_t len) {
    if (!m_session->established()) co_return io_result{make_error_code(tls_errc::not_established), 0};
    for (;;) {
      std::size_t n = 0;
      const auto st = m_session->read(buf, len, n);
      if (m_session->has_output()) {  // a reply the read produced (a key update, an alert)
        if (auto ec = co_await flush()) co_return io_result{ec, 0};
      }
      if (st == step::done) co_return io_result{{}, n};
      if (st == step::closed) co_return io_result{make_error_code(error::eof), 0};
      if (st == step::failed) co_return io_result{m_session->error(), 0};
      // Ciphertext from the peer, awaited here rather than through fill(): the common
      // path of a read makes no task but this one.
      auto [ec, got] = co_await m_next.read_some(m_in.get(), m_in_size);
      if (ec == error::eof) {
        m_session->mark_truncated();
        co_return io_result{m_session->error(), 0};
      }
      if (ec) co_return io_result{ec, 0};
      m_session->feed(m_in.get(), got);
      resize_input(got);
    }
  }

  /// Encrypts and sends up to `len` bytes (at most one record, 16 KiB): {ec, n}. From a weft task.
  task<io_result> write_some(const void* buf, std::size_t len) { return write(buf, len, false); }

  /// Encrypts and sends all `len` bytes: {ec, bytes accepted}. From a weft task.
  task<io_result> write_all(const void* buf, std::size_t len) { return write(buf, len, true); }

  /// Sends close_notify and waits for the peer's: {} once ours is sent and the peer's
  /// came, or the peer's end of the connection (many peers close without one); else the
  /// stream's error (bound the wait with weft::with_timeout). The socket stays open
  /// (close() closes it). From a weft task.
  task<std::error_code> shutdown() {
    for (;;) {
      const auto st = m_session->shutdown();
      if (auto ec = co_await flush()) co_return ec;
      if (st == step::done || st == step::closed) co_return std::error_code{};
      if (st == step::failed) co_return m_session->error();
      if (auto ec = co_await fill()) co_return ec == make_error_code(tls_errc::truncated) ? std::error_code{} : ec;
    }
  }

  /// The ALPN protocol agreed on in the handshake ("" when none).
  std::string alpn_protocol() const { return m_session->alpn(); }
  /// The peer certificate's subject ("CN=localhost,O=..."), "" when it sent none.
  std::string peer_subject() const { return m_session->peer_subject(); }
  /// True when the handshake resumed an earlier session (no full handshake).
  bool resumed() const { return m_session->resumed(); }
  /// The connection's SSL* (OpenSSL's), for what this class does not offer; not to be
  /// used while an operation of this stream is in flight.
  void* native_handle() const noexcept { return m_session->native_handle(); }
  /// The stream underneath (for its address, options; not for reading or writing).
  Stream& next_layer() noexcept { return m_next; }
  const Stream& next_layer() const noexcept { return m_next; }
  /// Closes the stream underneath (pending operations end as its close() says).
  void close() noexcept { m_next.close(); }
  /// Cancels the stream's operations in flight (as its cancel()).
  void cancel() { m_next.cancel(); }

 private:
  using step = detail::tls_session::step;
  static constexpr std::size_t k_record = 16384;           // TLS's largest plaintext record
  static constexpr std::size_t k_buffer = k_record + 512;  // one record with its overhead
  static constexpr std::size_t k_small = 2048;             // what an idle connection keeps, each way

  // write_some (`all` false: one record) and write_all: encrypts, then sends the records
  // (and anything a reader left to send) in order, holding the send lock throughout.
  task<io_result> write(const void* buf, std::size_t len, bool all) {
    if (!m_session->established()) co_return io_result{make_error_code(tls_errc::not_established), 0};
    const auto* p = static_cast<const char*>(buf);
    std::size_t done = 0;
    auto guard = co_await m_send->lock();
    do {
      std::size_t n = 0;
      const std::size_t chunk = len - done < k_record ? len - done : k_record;
      const auto st = m_session->write(p + done, chunk, n);
      if (st == step::failed) co_return io_result{m_session->error(), done};
      // A write that must read first: a renegotiation, which tls_context never allows
      // (only an SSL_CTX changed through native_handle() gets here).
      if (st != step::done) co_return io_result{make_error_code(tls_errc::protocol_error), done};
      done += n;
      // send_output(), written out here: the common path of a write makes no task but this one.
      std::unique_ptr<char[]> big;
      for (;;) {
        std::size_t cap = 0;
        char* to = output_buffer(big, cap);
        const std::size_t out = m_session->drain(to, cap);
        if (out == 0) break;
        auto [ec, sent] = co_await m_next.write_all(to, out);
        if (ec) co_return io_result{ec, done};
      }
    } while (all && done < len);
    co_return io_result{{}, done};
  }

  // Sends the ciphertext OpenSSL produced, in order, one sender at a time.
  task<std::error_code> flush() {
    auto guard = co_await m_send->lock();
    co_return co_await send_output();
  }

  // Sends what OpenSSL left to send; the caller holds the send lock. Through the small
  // buffer the stream keeps, or, for more (a handshake's certificates, a large write),
  // a buffer of up to k_buffer bytes made for this send and freed after it: an idle
  // connection holds k_small bytes for sending.
  task<std::error_code> send_output() {
    std::unique_ptr<char[]> big;
    for (;;) {
      std::size_t cap = 0;
      char* to = output_buffer(big, cap);
      const std::size_t n = m_session->drain(to, cap);
      if (n == 0) co_return std::error_code{};
      auto [ec, sent] = co_await m_next.write_all(to, n);
      if (ec) co_return ec;
    }
  }

  // Where the next drain goes: the small buffer, or `big` (made once) when more waits.
  char* output_buffer(std::unique_ptr<char[]>& big, std::size_t& cap) {
    if (!big && m_session->pending_output() <= k_small) {
      cap = k_small;
      return m_out.get();
    }
    if (!big) big = std::make_unique<char[]>(k_buffer);
    cap = k_buffer;
    return big.get();
  }

  // The read buffer follows the traffic: k_small while reads are small (an idle
  // connection's pending read pins only that), k_buffer once one filled it (a peer
  // sending full records), back to k_small after a small one.
  void resize_input(std::size_t got) {
    if (got == m_in_size && m_in_size < k_buffer) {
      m_in = std::make_unique<char[]>(k_buffer);
      m_in_size = k_buffer;
    } else if (got <= k_small / 4 && m_in_size > k_small) {
      m_in = std::make_unique<char[]>(k_small);
      m_in_size = k_small;
    }
  }

  // Reads ciphertext from the peer into OpenSSL. The peer's end: tls_errc::truncated
  // (a clean end after close_notify never gets here: OpenSSL reports closed first).
  task<std::error_code> fill() {
    auto [ec, n] = co_await m_next.read_some(m_in.get(), m_in_size);
    if (ec == error::eof) {
      m_session->mark_truncated();
      co_return m_session->error();
    }
    if (ec) co_return ec;
    m_session->feed(m_in.get(), n);
    resize_input(n);
    co_return std::error_code{};
  }

  Stream m_next;
  std::unique_ptr<detail::tls_session> m_session;
  std::unique_ptr<weft::mutex> m_send;
  std::unique_ptr<char[]> m_in;  // the reader's ciphertext buffer (resize_input)
  std::size_t m_in_size = k_small;
  std::unique_ptr<char[]> m_out;  // the sender's small buffer (send_output)
};

}  // namespace weft::io

/// Lets weft::io::tls_errc compare with std::error_code (as error conditions).
template <>
struct std::is_error_condition_enum<weft::io::tls_errc> : std::true_type {};
