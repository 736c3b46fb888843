// weft/io/udp.hpp: udp_socket over loopback (IPv4 and IPv6) on a uring_context, an
// io_pool (one reuse_port socket per worker) and from a thread_pool: datagrams and
// their sources, empty datagrams, truncation reported, connected sockets and their
// ICMP errors, close(), stops and deadlines, and bad input.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::datagram_result;
using weft::io::endpoint;
using weft::io::udp_socket;

namespace {

weft::task<datagram_result> send_to(udp_socket& s, std::string what, endpoint to) {
  co_return co_await s.send_to(what.data(), what.size(), to);
}

weft::task<datagram_result> receive(udp_socket& s, char* buf, std::size_t len) {
  co_return co_await s.receive_from(buf, len);
}

}  // namespace

TEST_CASE("udp: datagrams and their sources over IPv4 and IPv6, on a context and from a pool", "[io][udp]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  weft::thread_pool pool{{.threads = 1}};
  std::error_code pec;
  const endpoint v6 = endpoint::parse("::1", 0, pec);
  REQUIRE_FALSE(pec);
  for (const endpoint& at : {endpoint::loopback(0), v6}) {
    udp_socket server(*io), client(*io);
    if (auto ec = server.bind(at)) {
      WARN("cannot bind " << at.to_string() << ": " << ec.message());
      continue;
    }
    REQUIRE_FALSE(client.bind(at));
    const endpoint to = server.local_endpoint();
    REQUIRE(to.port() != 0);
    for (weft::executor* ex : {static_cast<weft::executor*>(io.get()), static_cast<weft::executor*>(&pool)}) {
      const auto w = weft::sync_wait(*ex, send_to(client, "datagram-1", to));
      CHECK_FALSE(w.ec);
      CHECK(w.n == 10);
      char buf[64] = {};
      const auto r = weft::sync_wait(*ex, receive(server, buf, sizeof buf));
      REQUIRE_FALSE(r.ec);
      CHECK(r.n == 10);
      CHECK(r.size == 10);
      CHECK(std::string(buf, r.n) == "datagram-1");
      CHECK(r.from.to_string() == client.local_endpoint().to_string());
      // An empty datagram is one too (not an end of stream).
      CHECK_FALSE(weft::sync_wait(*ex, send_to(client, "", to)).ec);
      const auto e = weft::sync_wait(*ex, receive(server, buf, sizeof buf));
      CHECK_FALSE(e.ec);
      CHECK(e.n == 0);
    }
  }
}

TEST_CASE("udp: a datagram larger than the buffer is reported, not cut silently", "[io][udp]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  udp_socket server(*io), client(*io);
  REQUIRE_FALSE(server.bind(endpoint::loopback(0)));
  REQUIRE_FALSE(client.bind(endpoint::loopback(0)));
  const std::string big(1000, 'b');
  REQUIRE_FALSE(weft::sync_wait(*io, send_to(client, big, server.local_endpoint())).ec);
  REQUIRE_FALSE(weft::sync_wait(*io, send_to(client, "next", server.local_endpoint())).ec);
  char small[10];
  const auto r = weft::sync_wait(*io, receive(server, small, sizeof small));
  CHECK(r.ec == std::errc::message_size);
  CHECK(r.n == 10);
  CHECK(r.size == 1000);
  CHECK(std::string(small, 10) == std::string(10, 'b'));
  char buf[64];
  const auto next = weft::sync_wait(*io, receive(server, buf, sizeof buf));  // the next one is whole
  CHECK_FALSE(next.ec);
  CHECK(std::string(buf, next.n) == "next");
}

TEST_CASE("udp: a connected socket talks to its peer; its ICMP errors come back", "[io][udp]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  udp_socket a(*io), b(*io);
  REQUIRE_FALSE(a.bind(endpoint::loopback(0)));
  REQUIRE_FALSE(b.bind(endpoint::loopback(0)));
  REQUIRE_FALSE(a.connect(b.local_endpoint()));
  REQUIRE_FALSE(b.connect(a.local_endpoint()));
  const bool ok = weft::sync_wait(*io, [&]() -> weft::task<bool> {
    auto w = co_await a.send("ping", 4);
    char buf[8];
    auto r = co_await b.receive(buf, sizeof buf);
    co_return !w.ec && !r.ec && r.n == 4 && std::string(buf, 4) == "ping" &&
        r.from.to_string() == a.local_endpoint().to_string();
  }());
  CHECK(ok);
  // A peer that is gone: its port answers with ICMP port unreachable.
  const endpoint gone = b.local_endpoint();
  b.close();
  const auto refused = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
    (void)co_await a.send("x", 1);
    char buf[8];
    auto r = co_await weft::io::with_timeout(a.receive(buf, sizeof buf), 2s);
    co_return r.ec;
  }());
  CHECK(refused == std::errc::connection_refused);
  (void)gone;
}

TEST_CASE("udp: close(), a stop and a deadline end a receive; errors of bad input", "[io][udp]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  SECTION("close() from another thread while a task waits, and every operation after it") {
    udp_socket s(*io);
    REQUIRE_FALSE(s.bind(endpoint::loopback(0)));
    const endpoint at = s.local_endpoint();
    std::thread closer([&] {
      std::this_thread::sleep_for(20ms);
      s.close();
    });
    char buf[16];
    const auto r = weft::sync_wait(*io, receive(s, buf, sizeof buf));
    closer.join();
    CHECK(r.ec == weft::io::error::cancelled);
    CHECK_FALSE(s.is_open());
    CHECK(weft::sync_wait(*io, receive(s, buf, sizeof buf)).ec == weft::io::error::cancelled);
    CHECK(weft::sync_wait(*io, send_to(s, "x", at)).ec == weft::io::error::cancelled);
    CHECK(s.native_handle() == -1);
    CHECK_FALSE(s.bind(endpoint::loopback(0)));  // a closed socket may be bound again
  }
  SECTION("a scope's stop, weft::with_timeout and weft::io::with_timeout") {
    udp_socket s(*io);
    REQUIRE_FALSE(s.bind(endpoint::loopback(0)));
    char buf[16];
    const auto stopped = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
      weft::scope<datagram_result> sc;
      sc.spawn(receive(s, buf, sizeof buf));
      co_await weft::io::sleep_for(*io, 10ms);
      sc.request_stop();
      auto v = co_await sc.next();
      co_await sc.join();
      co_return v ? v->ec : std::error_code{};
    }());
    CHECK(stopped == std::errc::operation_canceled);
    const auto late = weft::sync_wait(*io, weft::with_timeout(s.receive_from(buf, sizeof buf), 20ms));
    CHECK(late.ec == std::errc::timed_out);
    const auto linked = weft::sync_wait(*io, [&]() -> weft::task<datagram_result> {
      co_return co_await weft::io::with_timeout(s.receive_from(buf, sizeof buf), 20ms);
    }());
    CHECK(linked.ec == weft::io::error::timed_out);
    CHECK(s.is_open());
  }
  SECTION("bad input") {
    udp_socket s(*io), t(*io), never(*io);
    CHECK(s.bind(endpoint{}) == std::errc::invalid_argument);
    CHECK(s.connect(endpoint{}) == std::errc::invalid_argument);
    REQUIRE_FALSE(s.bind(endpoint::loopback(0)));
    CHECK(s.bind(endpoint::loopback(0)) == std::errc::already_connected);
    CHECK(t.bind(s.local_endpoint(), {.reuse_address = false}) == std::errc::address_in_use);
    char buf[4];
    CHECK(weft::sync_wait(*io, receive(never, buf, sizeof buf)).ec == std::errc::bad_file_descriptor);
  }
}

TEST_CASE("udp: every socket bound to port 0 gets a port of its own", "[io][udp]") {
  // Linux hands one picked port to several SO_REUSEADDR datagram sockets; bind() must not
  // ask for SO_REUSEADDR then (reuse_address is on by default). 600 sockets: with the
  // option, a few dozen of them would share ports.
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  std::vector<std::unique_ptr<udp_socket>> socks;
  std::set<std::uint16_t> ports;
  for (int i = 0; i < 600; ++i) {
    socks.push_back(std::make_unique<udp_socket>(*io));
    REQUIRE_FALSE(socks.back()->bind(endpoint::loopback(0)));
    ports.insert(socks.back()->local_endpoint().port());
  }
  CHECK(ports.size() == socks.size());
  // On a given port SO_REUSEADDR still applies: two sockets may share it.
  const auto port = socks.front()->local_endpoint().port();
  socks.front()->close();
  udp_socket a(*io), b(*io);
  CHECK_FALSE(a.bind(endpoint::loopback(port)));
  CHECK_FALSE(b.bind(endpoint::loopback(port)));
  udp_socket exclusive(*io);
  CHECK(exclusive.bind(endpoint::loopback(port), {.reuse_address = false}) == std::errc::address_in_use);
}

namespace {

// Echoes every datagram back to its source until stopped.
weft::task<void> echo_loop(udp_socket& s, std::atomic<int>& echoed) {
  char buf[2048];
  for (;;) {
    auto r = co_await s.receive_from(buf, sizeof buf);
    if (r.ec) co_return;
    auto w = co_await s.send_to(buf, r.n, r.from);
    if (w.ec) co_return;
    echoed.fetch_add(1, std::memory_order_relaxed);
  }
}

// One client socket: `count` numbered datagrams, each waited for and checked.
weft::task<int> echo_client(weft::io::uring_context& io, endpoint server, int id, int count) {
  udp_socket c(io);
  if (c.bind(endpoint::loopback(0))) co_return 1;
  int wrong = 0;
  char out[64], in[64];
  for (int k = 0; k < count; ++k) {
    const int n = std::snprintf(out, sizeof out, "client %d datagram %d", id, k);
    auto w = co_await c.send_to(out, static_cast<std::size_t>(n), server);
    auto r = co_await weft::io::with_timeout(c.receive_from(in, sizeof in), 2s);
    if (w.ec || r.ec || r.n != static_cast<std::size_t>(n) || std::memcmp(in, out, r.n) != 0) ++wrong;
  }
  co_return wrong;
}

}  // namespace

TEST_CASE("udp: one reuse_port socket per io_pool worker echoes every client's datagrams", "[io][udp]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  std::vector<std::unique_ptr<udp_socket>> servers;
  std::uint16_t port = 0;
  for (int w = 0; w < 2; ++w) {
    servers.push_back(std::make_unique<udp_socket>(*io));
    REQUIRE_FALSE(servers.back()->bind(endpoint::loopback(port), {.reuse_port = true}));
    port = servers.back()->local_endpoint().port();
  }
  std::atomic<int> echoed{0};
  constexpr int k_clients = 16, k_each = 200;
  const int wrong = weft::sync_wait(*io, [&]() -> weft::task<int> {
    weft::scope<> loops;
    for (auto& s : servers) loops.spawn(echo_loop, std::ref(*s), std::ref(echoed));
    weft::scope<int> clients;
    for (int i = 0; i < k_clients; ++i) clients.spawn(echo_client(*io, endpoint::loopback(port), i, k_each));
    int bad = 0;
    while (auto v = co_await clients.next()) bad += *v;
    co_await clients.join();
    loops.request_stop();
    co_await loops.join();
    co_return bad;
  }());
  CHECK(wrong == 0);
  CHECK(echoed.load() == k_clients * k_each);
}
