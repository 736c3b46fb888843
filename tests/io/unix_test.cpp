// weft/io/unix.hpp: Unix domain sockets on a uring_context and an io_pool: endpoints
// (paths, abstract names, bad names), streams (echo, peer credentials, addresses,
// socketpair), a listener's stale socket file, connect errors, close / stop / deadline
// on a pending read, datagrams (sources, unnamed senders, truncation, close), and the
// vectored read_some / write_some / write_all of every stream type (over a Unix pair
// and TCP), and fds back to where they were.
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::io_result;
using weft::io::unix_datagram;
using weft::io::unix_endpoint;
using weft::io::unix_listener;
using weft::io::unix_stream;
using weft_io_test::run;
using weft_io_test::temp_path;

namespace {

// Accepts one connection and echoes it until the peer's end.
weft::task<std::error_code> echo_one(unix_listener& l) {
  auto [ec, s] = co_await l.accept();
  if (ec) co_return ec;
  char buf[4096];
  for (;;) {
    auto [rec, n] = co_await s.read_some(buf, sizeof buf);
    if (rec == weft::io::error::eof) co_return std::error_code{};
    if (rec) co_return rec;
    auto [wec, m] = co_await s.write_all(buf, n);
    if (wec) co_return wec;
  }
}

// Connects to `at`, sends `what`, reads the echo, closes.
weft::task<std::string> echo_client(weft::io::uring_context& io, unix_endpoint at, std::string what) {
  unix_stream s(io);
  if (auto ec = co_await s.connect(at)) co_return "connect: " + ec.message();
  if (auto [ec, n] = co_await s.write_all(what.data(), what.size()); ec) co_return "write: " + ec.message();
  std::string got(what.size(), '\0');
  std::size_t have = 0;
  while (have < got.size()) {
    auto [ec, n] = co_await s.read_some(got.data() + have, got.size() - have);
    if (ec) co_return "read: " + ec.message();
    have += n;
  }
  co_return got;
}

weft::task<std::string> echo_round(weft::io::uring_context& io, unix_listener& l, unix_endpoint at, std::string what) {
  weft::scope<std::error_code> sc;
  sc.spawn(echo_one(l));
  std::string got = co_await echo_client(io, at, what);
  auto server = co_await sc.next();
  co_await sc.join();
  if (server && *server) co_return "server: " + server->message();
  co_return got;
}

weft::task<std::error_code> connect_to(unix_stream& s, unix_endpoint at) { co_return co_await s.connect(at); }

weft::task<io_result> read_into(unix_stream& s, char* buf, std::size_t len) {
  co_return co_await s.read_some(buf, len);
}

}  // namespace

TEST_CASE("unix: endpoints of paths and abstract names, and bad names", "[io][unix]") {
  const unix_endpoint p = unix_endpoint::path("/tmp/x.sock");
  CHECK_FALSE(p.empty());
  CHECK_FALSE(p.is_abstract());
  CHECK_FALSE(p.unnamed());
  CHECK(p.name() == "/tmp/x.sock");
  CHECK(p.to_string() == "/tmp/x.sock");
  const unix_endpoint a = unix_endpoint::abstract("weft\0svc");  // a NUL inside is a byte of the name
  CHECK(a.is_abstract());
  CHECK(a.name() == std::string("weft\0svc", 4));  // the literal's length stops at the NUL
  CHECK(a.to_string() == "@weft");
  const std::string with_nul("weft\0svc", 8);
  CHECK(unix_endpoint::abstract(with_nul).name() == with_nul);
  CHECK(unix_endpoint::path("").empty());
  CHECK(unix_endpoint::path(with_nul).empty());
  CHECK(unix_endpoint::path(std::string(unix_endpoint::max_length(), 'a')).name().size() ==
        unix_endpoint::max_length());
  CHECK(unix_endpoint::path(std::string(unix_endpoint::max_length() + 1, 'a')).empty());
  CHECK(unix_endpoint::abstract(std::string(unix_endpoint::max_length() + 1, 'a')).empty());
  CHECK(unix_endpoint{}.to_string() == "(empty endpoint)");
  const unix_endpoint back = unix_endpoint::from(p.data(), p.size());
  CHECK(back.to_string() == p.to_string());
  CHECK(unix_endpoint::from(weft::io::endpoint::loopback(80).data(), weft::io::endpoint::loopback(80).size()).empty());
}

TEST_CASE("unix: a stream over a path and an abstract name, on a context and a pool", "[io][unix]") {
  const std::size_t fds = weft_io_test::fd_count();
  {
    auto ctx = weft_io_test::make_uring_or_skip();
    if (!ctx) return;
    auto pool = weft_io_test::make_io_pool_or_skip(2);
    if (!pool) return;
    temp_path tp{"weft-unix", ".sock"};
    for (weft::io::uring_context* io :
         {static_cast<weft::io::uring_context*>(ctx.get()), static_cast<weft::io::uring_context*>(pool.get())}) {
      const std::string name = "weft-test-" + std::to_string(::getpid()) + (io == ctx.get() ? "-ctx" : "-pool");
      for (const unix_endpoint& at : {unix_endpoint::path(tp.path), unix_endpoint::abstract(name)}) {
        unix_listener l(*io);
        REQUIRE_FALSE(l.listen(at, {.remove_stale = true}));
        CHECK(l.local_endpoint().to_string() == at.to_string());
        std::string big(200'000, 'x');  // more than a socket buffer: several sends and reads
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
        CHECK(weft::sync_wait(*io, echo_round(*io, l, at, "hello over " + at.to_string())) ==
              "hello over " + at.to_string());
        CHECK(weft::sync_wait(*io, echo_round(*io, l, at, big)) == big);
      }
    }
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}

TEST_CASE("unix: peer credentials, addresses and a socketpair", "[io][unix]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  temp_path tp{"weft-unix", ".sock"};
  unix_listener l(*io);
  REQUIRE_FALSE(l.listen(unix_endpoint::path(tp.path)));
  unix_stream c(*io);
  REQUIRE_FALSE(weft::sync_wait(*io, connect_to(c, unix_endpoint::path(tp.path))));
  auto [ec, s] =
      weft::sync_wait(*io, [&]() -> weft::task<weft::io::unix_accept_result> { co_return co_await l.accept(); }());
  REQUIRE_FALSE(ec);
  const auto cred = s.peer_credentials();
  REQUIRE_FALSE(cred.ec);
  CHECK(cred.pid == ::getpid());
  CHECK(cred.uid == ::getuid());
  CHECK(cred.gid == ::getgid());
  CHECK(c.remote_endpoint().to_string() == tp.path);
  CHECK(s.local_endpoint().to_string() == tp.path);
  CHECK(s.remote_endpoint().unnamed());  // the client did not bind
  unix_stream none(*io);
  CHECK(none.peer_credentials().ec == std::errc::bad_file_descriptor);
  CHECK(none.remote_endpoint().empty());

  unix_stream a(*io), b(*io);
  REQUIRE_FALSE(unix_stream::pair(a, b));
  CHECK(unix_stream::pair(a, b) == std::errc::already_connected);
  CHECK(a.peer_credentials().pid == ::getpid());
  const auto sent = weft::sync_wait(*io, run(a.write_all("pair", 4)));
  CHECK_FALSE(sent.ec);
  char buf[8];
  const auto got = weft::sync_wait(*io, read_into(b, buf, sizeof buf));
  REQUIRE_FALSE(got.ec);
  CHECK(std::string(buf, got.n) == "pair");
  a.shutdown(SHUT_WR);
  CHECK(weft::sync_wait(*io, read_into(b, buf, sizeof buf)).ec == weft::io::error::eof);
}

TEST_CASE("unix: a stale socket file, another file at the path, and connect errors", "[io][unix]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  temp_path tp{"weft-unix", ".sock"};
  const unix_endpoint at = unix_endpoint::path(tp.path);
  unix_stream s(*io);
  CHECK(weft::sync_wait(*io, connect_to(s, at)) == std::errc::no_such_file_or_directory);
  CHECK_FALSE(s.is_open());  // a failed connect leaves the stream without a socket, to try again
  {
    unix_listener l(*io);
    REQUIRE_FALSE(l.listen(at));
  }
  // The socket file stays after close(): nobody listens there now.
  struct stat st{};
  REQUIRE(::lstat(tp.path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK(weft::sync_wait(*io, connect_to(s, at)) == std::errc::connection_refused);
  unix_listener l(*io);
  CHECK(l.listen(at) == std::errc::address_in_use);
  REQUIRE_FALSE(l.listen(at, {.remove_stale = true}));
  CHECK(l.listen(at) == std::errc::already_connected);
  l.close();
  // A file that is not a socket is never removed.
  std::filesystem::remove(tp.path);
  std::ofstream(tp.path) << "not a socket";
  unix_listener m(*io);
  CHECK(m.listen(at, {.remove_stale = true}) == std::errc::address_in_use);
  CHECK(std::filesystem::is_regular_file(tp.path));
  CHECK(m.listen(unix_endpoint{}) == std::errc::invalid_argument);
  CHECK(m.listen(unix_endpoint::path("/nonexistent-dir-weft/x.sock")) == std::errc::no_such_file_or_directory);
  CHECK(weft::sync_wait(*io, connect_to(s, unix_endpoint{})) == std::errc::invalid_argument);
  unix_stream a(*io), b(*io);
  REQUIRE_FALSE(unix_stream::pair(a, b));
  CHECK(weft::sync_wait(*io, connect_to(a, at)) == std::errc::already_connected);
  CHECK_THROWS_AS(unix_listener(*io, 1), std::out_of_range);
}

TEST_CASE("unix: close(), a stop and a deadline end a pending read", "[io][unix]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  unix_stream a(*io), b(*io);
  REQUIRE_FALSE(unix_stream::pair(a, b));
  char buf[16];
  const auto timed = weft::sync_wait(*io, [&]() -> weft::task<io_result> {
    co_return co_await weft::io::with_timeout(a.read_some(buf, sizeof buf), 20ms);
  }());
  CHECK(timed.ec == weft::io::error::timed_out);
  const auto stopped = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
    weft::scope<io_result> sc;
    sc.spawn(read_into(a, buf, sizeof buf));
    co_await weft::io::sleep_for(*io, 10ms);
    sc.request_stop();
    auto v = co_await sc.next();
    co_await sc.join();
    co_return v ? v->ec : std::error_code{};
  }());
  CHECK(stopped == std::errc::operation_canceled);
  std::thread canceller([&] {
    std::this_thread::sleep_for(20ms);
    a.cancel();
  });
  CHECK(weft::sync_wait(*io, read_into(a, buf, sizeof buf)).ec == std::errc::operation_canceled);
  canceller.join();
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    a.close();
  });
  CHECK(weft::sync_wait(*io, read_into(a, buf, sizeof buf)).ec == weft::io::error::cancelled);
  closer.join();
  CHECK(weft::sync_wait(*io, read_into(a, buf, sizeof buf)).ec == weft::io::error::cancelled);
  CHECK(weft::sync_wait(*io, read_into(b, buf, sizeof buf)).ec == weft::io::error::eof);
}

namespace {
weft::task<weft::io::unix_datagram_result> receive_dgram(unix_datagram& s, char* buf, std::size_t len) {
  co_return co_await s.receive_from(buf, len);
}
}  // namespace

TEST_CASE("unix: datagrams, their sources, unnamed senders, truncation and close", "[io][unix]") {
  const std::size_t fds = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    temp_path tp{"weft-unix", ".sock"};
    const unix_endpoint server_at = unix_endpoint::path(tp.path);
    const unix_endpoint client_at = unix_endpoint::abstract("weft-dgram-" + std::to_string(::getpid()));
    unix_datagram server(*io), client(*io), anon(*io);
    REQUIRE_FALSE(server.bind(server_at));
    REQUIRE_FALSE(client.bind(client_at));
    CHECK(server.local_endpoint().to_string() == tp.path);
    char buf[64] = {};
    CHECK_FALSE(weft::sync_wait(*io, run(client.send_to("dgram-1", 7, server_at))).ec);
    auto r = weft::sync_wait(*io, receive_dgram(server, buf, sizeof buf));
    REQUIRE_FALSE(r.ec);
    CHECK(std::string(buf, r.n) == "dgram-1");
    CHECK(r.from.to_string() == client_at.to_string());
    // A reply to the source.
    CHECK_FALSE(weft::sync_wait(*io, run(server.send_to("reply", 5, r.from))).ec);
    auto back = weft::sync_wait(*io, receive_dgram(client, buf, sizeof buf));
    CHECK(std::string(buf, back.n) == "reply");
    // An unbound sender (connect() makes its socket): its datagrams come from nobody.
    REQUIRE_FALSE(anon.connect(server_at));
    CHECK_FALSE(weft::sync_wait(*io, run(anon.send("anon", 4))).ec);
    r = weft::sync_wait(*io, receive_dgram(server, buf, sizeof buf));
    CHECK(std::string(buf, r.n) == "anon");
    CHECK(r.from.unnamed());
    // Too large for the buffer: reported.
    const std::string large(100, 'L');
    CHECK_FALSE(weft::sync_wait(*io, run(client.send_to(large.data(), large.size(), server_at))).ec);
    char small[10];
    r = weft::sync_wait(*io, receive_dgram(server, small, sizeof small));
    CHECK(r.ec == std::errc::message_size);
    CHECK(r.n == 10);
    CHECK(r.size == 100);
    // A pair.
    unix_datagram a(*io), b(*io);
    REQUIRE_FALSE(unix_datagram::pair(a, b));
    CHECK_FALSE(weft::sync_wait(*io, run(a.send("p", 1))).ec);
    const auto pr = weft::sync_wait(*io, run(b.receive(buf, sizeof buf)));
    CHECK_FALSE(pr.ec);
    CHECK(pr.n == 1);
    CHECK(pr.from.unnamed());
    // Errors.
    unix_datagram lone(*io);
    CHECK(lone.bind(unix_endpoint{}) == std::errc::invalid_argument);
    CHECK(lone.connect(unix_endpoint::path(tp.path + ".none")) == std::errc::no_such_file_or_directory);
    unix_datagram dup(*io);
    CHECK(dup.bind(server_at) == std::errc::address_in_use);
    CHECK(server.bind(server_at) == std::errc::already_connected);
    unix_datagram unconnected(*io);
    REQUIRE_FALSE(unconnected.bind(unix_endpoint::abstract("weft-dgram-u-" + std::to_string(::getpid()))));
    CHECK(weft::sync_wait(*io, run(unconnected.send("x", 1))).ec == std::errc::not_connected);
    // close() from another thread ends a pending receive.
    std::thread closer([&] {
      std::this_thread::sleep_for(20ms);
      server.close();
    });
    CHECK(weft::sync_wait(*io, receive_dgram(server, buf, sizeof buf)).ec == weft::io::error::cancelled);
    closer.join();
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}

namespace {

// Writes `parts` with one vectored write_all.
template <class Stream>
weft::task<io_result> gather_all(Stream& s, const std::vector<std::string>& parts) {
  std::vector<iovec> v;
  for (const auto& p : parts) v.push_back({const_cast<char*>(p.data()), p.size()});
  auto w = s.write_all(std::span<const iovec>(v));
  v.assign(v.size(), iovec{});  // the awaitable has its own copy of the list
  co_return co_await std::move(w);
}

// Reads `total` bytes with scatter reads of three buffers each.
template <class Stream>
weft::task<std::string> scatter_read(Stream& s, std::size_t total) {
  std::string out;
  char a[7], b[1000], c[5000];
  const iovec v[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
  while (out.size() < total) {
    auto [ec, n] = co_await s.read_some(std::span<const iovec>(v));
    if (ec) co_return out + "<" + ec.message() + ">";
    std::size_t left = n;
    for (const iovec& x : v) {
      const std::size_t take = std::min(left, x.iov_len);
      out.append(static_cast<const char*>(x.iov_base), take);
      left -= take;
    }
  }
  co_return out;
}

template <class Stream>
weft::task<std::string> gather_and_scatter(Stream& w, Stream& r, std::vector<std::string> parts, std::size_t total,
                                           io_result& written) {
  weft::scope<io_result> sc;
  sc.spawn(gather_all(w, parts));
  std::string got = co_await scatter_read(r, total);
  auto res = co_await sc.next();
  co_await sc.join();
  if (res) written = *res;
  co_return got;
}

template <class Stream>
void check_vectored(weft::io::uring_context& io, Stream& w, Stream& r) {
  // 20 buffers (more than the inline copy), some empty, 1.2 MB in all: many partial sends.
  std::vector<std::string> parts;
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    std::string p(i % 5 == 0 ? 0 : 1000 + 60'000 * i % 150'000, '\0');
    for (std::size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>('A' + (i + k) % 23);
    expected += p;
    parts.push_back(std::move(p));
  }
  io_result written;
  const std::string got = weft::sync_wait(io, gather_and_scatter(w, r, parts, expected.size(), written));
  CHECK_FALSE(written.ec);
  CHECK(written.n == expected.size());
  CHECK(got.size() == expected.size());
  CHECK(got == expected);
  // One gather write_some: up to the sum, in order.
  const iovec two[2] = {{const_cast<char*>("head:"), 5}, {const_cast<char*>("body"), 4}};
  const auto one = weft::sync_wait(io, run(w.write_some(std::span<const iovec>(two))));
  CHECK_FALSE(one.ec);
  CHECK(one.n == 9);
  CHECK(weft::sync_wait(io, scatter_read(r, 9)) == "head:body");
  // Nothing to write: done at once.
  CHECK(weft::sync_wait(io, run(w.write_all(std::span<const iovec>()))).n == 0);
  // The peer's end: a scatter read yields eof.
  w.shutdown(SHUT_WR);
  CHECK(weft::sync_wait(io, scatter_read(r, 1)) == "<" + make_error_code(weft::io::error::eof).message() + ">");
}

}  // namespace

TEST_CASE("streams: vectored read_some, write_some and write_all over Unix and TCP", "[io][unix][tcp]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  SECTION("unix_stream pair") {
    unix_stream a(*io), b(*io);
    REQUIRE_FALSE(unix_stream::pair(a, b));
    check_vectored(*io, a, b);
  }
  SECTION("tcp_stream over loopback") {
    weft::io::tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
    weft::io::tcp_stream c(*io);
    REQUIRE_FALSE(weft::sync_wait(*io, run(c.connect(l.local_endpoint()))));
    auto [ec, s] =
        weft::sync_wait(*io, [&]() -> weft::task<weft::io::accept_result> { co_return co_await l.accept(); }());
    REQUIRE_FALSE(ec);
    check_vectored(*io, c, s);
  }
}
