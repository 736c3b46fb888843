// weft/io/tls.hpp: TLS over tcp_stream on an io_pool (and over a Unix socketpair), with
// certificates made at test time: echo of small and large messages both ways, ALPN, SNI,
// client certificates, session resumption, and bad input (a refused certificate: self-
// signed, expired, wrong host name; plaintext to the TLS port; a stalled handshake ended
// by a deadline; a truncated record; a reset mid-stream; a renegotiation attempt;
// thousands of handshakes with random aborts, fds back to where they were).
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/io/tls.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::endpoint;
using weft::io::io_result;
using weft::io::tcp_listener;
using weft::io::tcp_stream;
using weft::io::tls_context;
using weft::io::tls_errc;
using weft::io::tls_stream;

namespace {

#if defined(__has_feature)
#  if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool k_sanitized = true;
#  else
constexpr bool k_sanitized = false;
#  endif
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool k_sanitized = true;
#else
constexpr bool k_sanitized = false;
#endif

// The certificates of every test: a CA, and leaves it signed.
struct certs {
  weft::io::tls_certificate ca = weft::io::make_self_signed_certificate({"weft test CA"}, 30);
  weft::io::tls_certificate leaf = weft::io::make_self_signed_certificate({"localhost", "127.0.0.1"}, 30, &ca);
  weft::io::tls_certificate other = weft::io::make_self_signed_certificate({"other.test"}, 30, &ca);
  weft::io::tls_certificate expired = weft::io::make_self_signed_certificate({"localhost"}, -2, &ca);
  weft::io::tls_certificate self_signed = weft::io::make_self_signed_certificate({"localhost"}, 30);
  weft::io::tls_certificate client = weft::io::make_self_signed_certificate({"client-7"}, 30, &ca);
};

const certs& the_certs() {
  static const certs c;
  return c;
}

tls_context server_ctx(const weft::io::tls_certificate& c) {
  auto ctx = tls_context::server();
  REQUIRE_FALSE(ctx.use_certificate_chain(c.chain_pem));
  REQUIRE_FALSE(ctx.use_private_key(c.key_pem));
  return ctx;
}

tls_context client_ctx() {
  auto ctx = tls_context::client();
  REQUIRE_FALSE(ctx.add_certificate_authority(the_certs().ca.chain_pem));
  return ctx;
}

// What the server side of one connection saw.
struct served {
  std::error_code handshake;
  std::error_code end;  // what ended the echo loop (error::eof after close_notify)
  std::size_t bytes = 0;
  std::string alpn;
  std::string peer;
};

// Accepts one connection, handshakes, echoes until the peer's close_notify, shuts down.
weft::task<served> serve_one(tcp_listener& l, tls_context ctx, std::chrono::milliseconds handshake_limit) {
  served out;
  auto [ec, conn] = co_await l.accept();
  if (ec) {
    out.handshake = ec;
    co_return out;
  }
  tls_stream tls(std::move(conn), ctx);
  auto hs = co_await weft::with_timeout(tls.handshake(), handshake_limit);
  out.handshake = hs.ec ? hs.ec : *hs.value;
  if (out.handshake) co_return out;
  out.alpn = tls.alpn_protocol();
  out.peer = tls.peer_subject();
  std::vector<char> buf(20'000);
  for (;;) {
    auto [rec, n] = co_await tls.read_some(buf.data(), buf.size());
    if (rec) {
      out.end = rec;
      break;
    }
    out.bytes += n;
    if (auto [wec, m] = co_await tls.write_all(buf.data(), n); wec) {
      out.end = wec;
      break;
    }
  }
  if (out.end == weft::io::error::eof) (void)co_await tls.shutdown();
  co_return out;
}

struct client_result {
  std::error_code handshake;
  bool resumed = false;
  std::string echoed;
  std::string alpn;
  std::string peer;
  std::error_code shutdown;
};

weft::task<client_result> talk(weft::io::uring_context& io, endpoint at, tls_context ctx, std::string name,
                               std::string message) {
  client_result out;
  tcp_stream s(io);
  if ((out.handshake = co_await s.connect(at))) co_return out;
  tls_stream tls(std::move(s), ctx, name);
  if ((out.handshake = co_await tls.handshake())) co_return out;
  out.alpn = tls.alpn_protocol();
  out.peer = tls.peer_subject();
  out.resumed = tls.resumed();
  // Writer and reader at once (the message may be larger than the socket buffers).
  weft::scope<io_result> sc;
  sc.spawn(tls.write_all(message.data(), message.size()));
  std::string got(message.size(), '\0');
  std::size_t have = 0;
  while (have < got.size()) {
    auto [ec, n] = co_await tls.read_some(got.data() + have, got.size() - have);
    if (ec) break;
    have += n;
  }
  (void)co_await sc.next();
  co_await sc.join();
  got.resize(have);
  out.echoed = std::move(got);
  out.shutdown = co_await tls.shutdown();
  co_return out;
}

struct round_result {
  served server;
  client_result client;
};

weft::task<round_result> round(weft::io::uring_context& io, tcp_listener& l, tls_context sctx, tls_context cctx,
                               std::string name, std::string message) {
  weft::scope<served> sc;
  sc.spawn(serve_one(l, sctx, 5s));
  round_result r;
  r.client = co_await talk(io, l.local_endpoint(), cctx, name, message);
  auto s = co_await sc.next();
  co_await sc.join();
  if (s) r.server = *s;
  co_return r;
}

}  // namespace

TEST_CASE("tls: echo both ways, ALPN, peer subjects, client certificates, SNI", "[io][tls]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  auto sctx = server_ctx(the_certs().leaf);
  REQUIRE_FALSE(sctx.set_alpn({"http/1.1"}));
  auto cctx = client_ctx();
  REQUIRE_FALSE(cctx.set_alpn({"h2", "http/1.1"}));
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i * 7 % 26);
  for (const std::string& msg : {std::string("hello over TLS"), big}) {
    auto r = weft::sync_wait(*io, round(*io, l, sctx, cctx, "localhost", msg));
    REQUIRE_FALSE(r.client.handshake);
    REQUIRE_FALSE(r.server.handshake);
    CHECK(r.client.echoed == msg);
    CHECK(r.server.bytes == msg.size());
    CHECK(r.server.end == weft::io::error::eof);  // the client's close_notify
    CHECK_FALSE(r.client.shutdown);
    CHECK(r.client.alpn == "http/1.1");
    CHECK(r.server.alpn == "http/1.1");
    CHECK(r.client.peer.find("CN=localhost") != std::string::npos);
    CHECK(r.server.peer.empty());  // no client certificate asked for
  }
  // By IP address: checked against the certificate's IP subjectAltName (no SNI).
  auto byip = weft::sync_wait(*io, round(*io, l, sctx, cctx, "127.0.0.1", "ip"));
  CHECK_FALSE(byip.client.handshake);
  CHECK(byip.client.echoed == "ip");

  SECTION("client certificates: required, then given") {
    auto strict = server_ctx(the_certs().leaf);
    REQUIRE_FALSE(strict.add_certificate_authority(the_certs().ca.chain_pem));
    strict.set_verify_peer(true);
    auto r = weft::sync_wait(*io, round(*io, l, strict, cctx, "localhost", "x"));
    CHECK(r.server.handshake == tls_errc::handshake_failed);
    auto with_cert = client_ctx();
    REQUIRE_FALSE(with_cert.use_certificate_chain(the_certs().client.chain_pem));
    REQUIRE_FALSE(with_cert.use_private_key(the_certs().client.key_pem));
    r = weft::sync_wait(*io, round(*io, l, strict, with_cert, "localhost", "with a certificate"));
    CHECK_FALSE(r.server.handshake);
    CHECK(r.client.echoed == "with a certificate");
    CHECK(r.server.peer.find("CN=client-7") != std::string::npos);
  }
  SECTION("session resumption: on by default, off when the server says so") {
    auto fresh = client_ctx();
    auto first = weft::sync_wait(*io, round(*io, l, sctx, fresh, "localhost", "one"));
    CHECK_FALSE(first.client.resumed);
    auto second = weft::sync_wait(*io, round(*io, l, sctx, fresh, "localhost", "two"));
    CHECK_FALSE(second.client.handshake);
    CHECK(second.client.resumed);
    CHECK(second.client.echoed == "two");
    auto no_tickets = server_ctx(the_certs().leaf);
    no_tickets.set_session_resumption(false);
    auto other = client_ctx();
    (void)weft::sync_wait(*io, round(*io, l, no_tickets, other, "localhost", "a"));
    auto again = weft::sync_wait(*io, round(*io, l, no_tickets, other, "localhost", "b"));
    CHECK_FALSE(again.client.handshake);
    CHECK_FALSE(again.client.resumed);
  }
  SECTION("SNI: a per-name certificate") {
    auto multi = server_ctx(the_certs().leaf);
    REQUIRE_FALSE(multi.add_server_name("Other.Test", the_certs().other.chain_pem, the_certs().other.key_pem));
    auto r = weft::sync_wait(*io, round(*io, l, multi, cctx, "other.test", "sni"));
    CHECK_FALSE(r.client.handshake);
    CHECK(r.client.peer.find("CN=other.test") != std::string::npos);
    r = weft::sync_wait(*io, round(*io, l, multi, cctx, "localhost", "default"));
    CHECK(r.client.peer.find("CN=localhost") != std::string::npos);
    CHECK(multi.add_server_name("", "", "") == std::errc::invalid_argument);
    CHECK(multi.add_server_name("x", "not a pem", the_certs().other.key_pem));
  }
}

namespace {
// The client's handshake against a server with certificate `c`, as `name`.
weft::task<std::pair<std::error_code, std::error_code>> handshake_pair(weft::io::uring_context& io, tcp_listener& l,
                                                                       tls_context sctx, tls_context cctx,
                                                                       std::string name) {
  weft::scope<served> sc;
  sc.spawn(serve_one(l, sctx, 5s));
  tcp_stream s(io);
  std::error_code client;
  if (!(client = co_await s.connect(l.local_endpoint()))) {
    tls_stream tls(std::move(s), cctx, name);
    client = co_await tls.handshake();
  }  // the client's socket closes here
  auto v = co_await sc.next();
  co_await sc.join();
  co_return std::pair{client, v ? v->handshake : std::error_code{}};
}
}  // namespace

TEST_CASE("tls: refused certificates: self-signed, expired, wrong host name", "[io][tls]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const auto cctx = client_ctx();
  struct bad {
    const weft::io::tls_certificate* cert;
    const char* name;
    const char* reason;  // in OpenSSL's message
  };
  const certs& c = the_certs();
  for (const bad& b : {bad{&c.self_signed, "localhost", "self"}, bad{&c.expired, "localhost", "expired"},
                       bad{&c.leaf, "wrong.test", "mismatch"}}) {
    INFO(b.reason);
    auto [client, server] = weft::sync_wait(*io, handshake_pair(*io, l, server_ctx(*b.cert), cctx, b.name));
    CHECK(client == tls_errc::verification_failed);
    CHECK(client == tls_errc::handshake_failed);
    CHECK(client.category() == weft::io::tls_category());
    CHECK(client.message().find(b.reason) != std::string::npos);
    CHECK(server == tls_errc::handshake_failed);  // the client's alert, or its end
  }
  // Verification off (a test client against a self-signed server): accepted.
  auto lax = tls_context::client();
  lax.set_verify_peer(false);
  auto [client, server] = weft::sync_wait(*io, handshake_pair(*io, l, server_ctx(c.self_signed), lax, "localhost"));
  CHECK_FALSE(client);
  // Bad setup input.
  auto ctx = tls_context::server();
  CHECK(ctx.use_certificate_chain("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"));
  CHECK(ctx.use_private_key("nothing"));
  CHECK(ctx.use_certificate_chain_file("/nonexistent/cert.pem") == std::errc::no_such_file_or_directory);
  CHECK(ctx.set_alpn({std::string(256, 'x')}) == std::errc::invalid_argument);
  REQUIRE_FALSE(ctx.use_certificate_chain(c.leaf.chain_pem));
  CHECK(ctx.use_private_key(c.other.key_pem));  // not the certificate's key
  CHECK_THROWS_AS(weft::io::make_self_signed_certificate({}), std::invalid_argument);
}

namespace {

// A raw TCP peer: connects, sends `bytes`, then waits up to `wait` for the server's end.
weft::task<std::string> raw_client(weft::io::uring_context& io, endpoint at, std::string bytes,
                                   std::chrono::milliseconds wait) {
  tcp_stream s(io);
  if (auto ec = co_await s.connect(at)) co_return "connect: " + ec.message();
  if (!bytes.empty()) (void)co_await s.write_all(bytes.data(), bytes.size());
  char buf[512];
  std::string got;
  for (;;) {
    auto r = co_await weft::with_timeout(s.read_some(buf, sizeof buf), wait);
    if (r.ec || r.value->ec) break;
    got.append(buf, r.value->n);
  }
  co_return got;
}

weft::task<std::pair<std::string, served>> raw_against_server(weft::io::uring_context& io, tcp_listener& l,
                                                              tls_context sctx, std::string bytes,
                                                              std::chrono::milliseconds handshake_limit) {
  weft::scope<served> sc;
  sc.spawn(serve_one(l, sctx, handshake_limit));
  std::string got = co_await raw_client(io, l.local_endpoint(), bytes, 2s);
  auto v = co_await sc.next();
  co_await sc.join();
  co_return std::pair{got, v ? *v : served{}};
}

// A raw TCP server: accepts, sends `bytes`, then closes (with a reset when `reset`).
weft::task<void> raw_server(tcp_listener& l, std::string bytes, bool reset) {
  auto [ec, s] = co_await l.accept();
  if (ec) co_return;
  char buf[4096];
  (void)co_await weft::with_timeout(s.read_some(buf, sizeof buf), 2s);  // the ClientHello
  if (!bytes.empty()) (void)co_await s.write_all(bytes.data(), bytes.size());
  if (reset) {  // a reset: SO_LINGER 0 and a plain close (close() would send a FIN first)
    const linger lg{1, 0};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(s.release());
  }
  s.close();
}

weft::task<std::error_code> client_against_raw(weft::io::uring_context& io, tcp_listener& l, std::string bytes,
                                               bool reset) {
  weft::scope<void> sc;
  sc.spawn(raw_server(l, bytes, reset));
  tcp_stream s(io);
  std::error_code out = co_await s.connect(l.local_endpoint());
  if (!out) {
    tls_stream tls(std::move(s), client_ctx(), "localhost");
    out = co_await tls.handshake();
  }
  co_await sc.join();
  co_return out;
}

}  // namespace

TEST_CASE("tls: plaintext to the TLS port, a stalled handshake, truncated and reset peers", "[io][tls]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  const std::size_t fds = weft_io_test::fd_count();
  {
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
    const auto sctx = server_ctx(the_certs().leaf);
    // Plaintext HTTP: the handshake fails at once, the client gets at most an alert.
    auto [got, s] = weft::sync_wait(*io, raw_against_server(*io, l, sctx, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 5s));
    CHECK(s.handshake == tls_errc::handshake_failed);
    CHECK(s.handshake.message().find("http request") != std::string::npos);
    CHECK(got.size() < 64);
    // A client that connects and sends nothing (slowloris): the deadline ends it.
    auto [got2, s2] = weft::sync_wait(*io, raw_against_server(*io, l, sctx, "", 100ms));
    CHECK(s2.handshake == std::errc::timed_out);
    // Half a ClientHello, then nothing: the same.
    auto [got3, s3] =
        weft::sync_wait(*io, raw_against_server(*io, l, sctx, std::string("\x16\x03\x01\x02\x00\x01", 6), 100ms));
    CHECK(s3.handshake == std::errc::timed_out);
    // A server that answers with a truncated record, then closes: the client's handshake
    // ends as truncated (the connection ended during it).
    const std::string partial(
        "\x16\x03\x03\x00\x64"
        "0123456789",
        15);
    const auto trunc = weft::sync_wait(*io, client_against_raw(*io, l, partial, false));
    CHECK(trunc == tls_errc::handshake_failed);
    CHECK(trunc == tls_errc::truncated);
    // ... and one that resets: connection_reset from the stream.
    const auto reset = weft::sync_wait(*io, client_against_raw(*io, l, partial, true));
    CHECK(reset == std::errc::connection_reset);
    // Garbage instead of a ServerHello: a protocol failure of the handshake.
    const auto garbage = weft::sync_wait(*io, client_against_raw(*io, l, std::string(64, 'Z'), false));
    CHECK(garbage == tls_errc::handshake_failed);
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}

namespace {
// After a handshake the server's socket goes without close_notify (closed or reset).
weft::task<void> handshake_then_drop(tcp_listener& l, tls_context ctx, bool reset) {
  auto [ec, conn] = co_await l.accept();
  if (ec) co_return;
  tls_stream tls(std::move(conn), ctx);
  if (co_await tls.handshake()) co_return;
  (void)co_await tls.write_all("partial", 7);
  if (reset) {
    const linger lg{1, 0};
    ::setsockopt(tls.next_layer().native_handle(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(tls.next_layer().release());
  }
  tls.close();
}

weft::task<std::pair<std::string, std::error_code>> read_until_end(weft::io::uring_context& io, tcp_listener& l,
                                                                   tls_context sctx, bool reset) {
  weft::scope<void> sc;
  sc.spawn(handshake_then_drop(l, sctx, reset));
  tcp_stream s(io);
  std::pair<std::string, std::error_code> out;
  if ((out.second = co_await s.connect(l.local_endpoint()))) co_return out;
  tls_stream tls(std::move(s), client_ctx(), "localhost");
  if ((out.second = co_await tls.handshake())) co_return out;
  char buf[64];
  for (;;) {
    auto [ec, n] = co_await tls.read_some(buf, sizeof buf);
    if (ec) {
      out.second = ec;
      break;
    }
    out.first.append(buf, n);
  }
  co_await sc.join();
  co_return out;
}

// Renegotiation: a TLS 1.2 client (renegotiation allowed on its side, through its
// SSL_CTX) asks for one after the handshake; the server refuses it: the client's second
// handshake fails, the server never handshakes again, nothing hangs.
weft::task<std::string> renegotiate(weft::io::uring_context& io, tcp_listener& l, tls_context sctx) {
  weft::scope<served> sc;
  sc.spawn(serve_one(l, sctx, 5s));
  auto cctx = client_ctx();
  auto* raw_ctx = static_cast<SSL_CTX*>(cctx.native_handle());
  SSL_CTX_set_max_proto_version(raw_ctx, TLS1_2_VERSION);
  SSL_CTX_clear_options(raw_ctx, SSL_OP_NO_RENEGOTIATION);
  tcp_stream s(io);
  if (auto ec = co_await s.connect(l.local_endpoint())) co_return "connect: " + ec.message();
  tls_stream tls(std::move(s), cctx, "localhost");
  if (auto ec = co_await tls.handshake()) co_return "handshake: " + ec.message();
  SSL* ssl = static_cast<SSL*>(tls.native_handle());
  std::string out = "asked " + std::to_string(SSL_renegotiate(ssl)) + "; ";
  auto again = co_await weft::with_timeout(tls.handshake(), 2s);
  out += again.ec ? "second handshake timed out; " : *again.value ? "second handshake refused; " : "renegotiated; ";
  tls.close();
  auto v = co_await sc.next();
  co_await sc.join();
  if (v)
    out += std::string("server handshake ") + (v->handshake ? "failed" : "ok") + "; server end " +
           (v->end ? "error" : "none");
  co_return out;
}
}  // namespace

TEST_CASE("tls: a peer gone without close_notify, a reset, a renegotiation attempt", "[io][tls]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const auto sctx = server_ctx(the_certs().leaf);
  auto [data, end] = weft::sync_wait(*io, read_until_end(*io, l, sctx, false));
  CHECK(data == "partial");
  CHECK(end == tls_errc::truncated);
  CHECK_FALSE(end == tls_errc::handshake_failed);
  auto [data2, end2] = weft::sync_wait(*io, read_until_end(*io, l, sctx, true));
  CHECK((end2 == std::errc::connection_reset || end2 == tls_errc::truncated));
  const std::string r = weft::sync_wait(*io, renegotiate(*io, l, sctx));
  INFO(r);
  CHECK(r == "asked 1; second handshake refused; server handshake ok; server end error");
}

TEST_CASE("tls: over a Unix socketpair; reads before the handshake", "[io][tls][unix]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  weft::io::unix_stream a(*io), b(*io);
  REQUIRE_FALSE(weft::io::unix_stream::pair(a, b));
  tls_stream server(std::move(a), server_ctx(the_certs().leaf));
  tls_stream client(std::move(b), client_ctx(), "localhost");
  char buf[8];
  CHECK(weft::sync_wait(*io, client.read_some(buf, sizeof buf)).ec == tls_errc::not_established);
  CHECK(weft::sync_wait(*io, client.write_all("x", 1)).ec == tls_errc::not_established);
  const auto both = weft::sync_wait(*io, [&]() -> weft::task<std::string> {
    weft::scope<std::error_code> sc;
    sc.spawn(server.handshake());
    auto c = co_await client.handshake();
    auto s = co_await sc.next();
    co_await sc.join();
    if (c || !s || *s) co_return "handshake failed";
    (void)co_await client.write_all("unix!", 5);
    char in[8];
    auto [ec, n] = co_await server.read_some(in, sizeof in);
    co_return ec ? ec.message() : std::string(in, n);
  }());
  CHECK(both == "unix!");
}

namespace {

// One client of the abort run: connects, and stops at a random point.
weft::task<int> aborting_client(weft::io::uring_context& io, endpoint at, tls_context ctx, unsigned seed) {
  std::minstd_rand rng(seed);
  const int where = static_cast<int>(rng() % 5);
  tcp_stream s(io);
  if (co_await s.connect(at)) co_return -1;
  if (where == 0) co_return 0;  // connect, close
  if (where == 1) {             // a few bytes of a ClientHello, then close
    (void)co_await s.write_all("\x16\x03\x01", 3);
    co_return 1;
  }
  tls_stream tls(std::move(s), ctx, "localhost");
  if (co_await tls.handshake()) co_return -1;
  if (where == 2) co_return 2;  // after the handshake, no close_notify
  (void)co_await tls.write_all("ping", 4);
  char buf[8];
  auto [ec, n] = co_await tls.read_some(buf, sizeof buf);
  if (ec || n != 4) co_return -1;
  if (where == 3) co_return 3;  // after an exchange, no close_notify
  (void)co_await tls.shutdown();
  co_return 4;
}

weft::task<void> serve_forever(tcp_listener& l, tls_context ctx, std::atomic<int>& ok, std::atomic<int>& failed);

weft::task<void> serve_conn(tcp_stream conn, tls_context ctx, std::atomic<int>& ok, std::atomic<int>& failed) {
  tls_stream tls(std::move(conn), ctx);
  auto hs = co_await weft::with_timeout(tls.handshake(), 5s);
  if (hs.ec || *hs.value) {
    failed.fetch_add(1);
    co_return;
  }
  ok.fetch_add(1);
  char buf[64];
  for (;;) {
    auto [ec, n] = co_await tls.read_some(buf, sizeof buf);
    if (ec) break;
    if ((co_await tls.write_all(buf, n)).ec) break;
  }
}

weft::task<void> serve_forever(tcp_listener& l, tls_context ctx, std::atomic<int>& ok, std::atomic<int>& failed) {
  weft::scope<void> sc;
  for (;;) {
    auto [ec, conn] = co_await l.accept();
    if (ec) break;
    sc.spawn(serve_conn(std::move(conn), ctx, ok, failed));
  }
  co_await sc.join();
}

weft::task<void> signal_when_done(weft::task<void> t, std::atomic<bool>& done) {
  co_await std::move(t);
  done.store(true);
}

weft::task<std::vector<int>> abort_run(weft::io::io_pool& io, endpoint at, tls_context cctx, int count) {
  std::vector<int> outcomes(6, 0);
  constexpr int k_batch = 32;
  for (int done = 0; done < count; done += k_batch) {
    std::vector<weft::task<int>> batch;
    for (int i = done; i < count && i < done + k_batch; ++i)
      batch.push_back(aborting_client(io, at, cctx, static_cast<unsigned>(i) * 2654435761u + 1));
    for (int v : co_await weft::spawn_many(std::move(batch))) ++outcomes[static_cast<std::size_t>(v + 1)];
  }
  co_return outcomes;
}

}  // namespace

TEST_CASE("tls: thousands of handshakes with random aborts lose nothing", "[io][tls]") {
  const std::size_t fds = weft_io_test::fd_count();
  const int count = k_sanitized ? 600 : 10'000;
  {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
    std::atomic<int> ok{0}, failed{0};
    auto sctx = server_ctx(the_certs().leaf);
    std::atomic<bool> server_done{false};
    weft::post(*io, signal_when_done(serve_forever(l, sctx, ok, failed), server_done));
    const auto outcomes = weft::sync_wait(*io, abort_run(*io, l.local_endpoint(), client_ctx(), count));
    CHECK(outcomes[0] == 0);  // no client failed where it should not
    int total = 0;
    for (int v : outcomes) total += v;
    CHECK(total == count);
    // Every connection was seen by the server: those that reached the handshake's end
    // are ok, the others (aborted in it) failed; none is left hanging.
    const int handshaken = outcomes[3] + outcomes[4] + outcomes[5];
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (ok.load() + failed.load() < count && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    CHECK(ok.load() == handshaken);
    CHECK(ok.load() + failed.load() == count);
    l.close();
    while (!server_done.load() && std::chrono::steady_clock::now() < until + 10s) std::this_thread::sleep_for(5ms);
    CHECK(server_done.load());
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}
