// io/README.md's server shape over io_uring (an accept loop forking each connection into
// a fork_group<void>): a finished connection is closed at once, not at the join, and
// the server survives running out of descriptors (EMFILE on accept: log, back off,
// keep serving). Skipped (with a WARN naming the cause) where io_uring is unavailable.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
namespace wio = weft::io;
using weft_io_test::failures;

namespace {

// As io/README.md's echo(): until the peer closes its end.
weft::task<void> echo(wio::tcp_stream s) {
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await s.read_some(buf, sizeof buf);
    if (ec || (co_await s.write_all(buf, n)).ec) co_return;
  }
}

// As io/README.md's serve(), until the listener is closed; counts the failed accepts.
weft::task<void> serve(wio::uring_context& io, wio::tcp_listener& listener, std::atomic<int>& accept_errors) {
  weft::fork_group<void> connections;
  for (;;) {
    auto [ec, s] = co_await listener.accept();
    if (ec == std::errc::operation_canceled) break;
    if (ec) {
      accept_errors.fetch_add(1);
      co_await wio::sleep_for(io, 10ms);
      continue;
    }
    connections.fork(echo(std::move(s)));
  }
  co_await connections.join();
}

int plain_socket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const timeval limit{10, 0};  // every blocking call below is bounded
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  return fd;
}

bool plain_connect(int fd, const wio::endpoint& at) { return weft_io_test::connect_blocking(fd, at) == 0; }

/// recv(2), again when a signal interrupted it.
ssize_t recv_retry(int fd, char* c) {
  ssize_t n;
  do n = ::recv(fd, c, 1, 0);
  while (n < 0 && errno == EINTR);
  return n;
}

/// Sends one byte, reads it back and then expects EOF (the server closed its end).
std::string echo_then_eof(int fd, bool half_close) {
  if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) return "send failed";
  if (half_close) ::shutdown(fd, SHUT_WR);
  char c = 0;
  if (const ssize_t n = recv_retry(fd, &c); n != 1 || c != 'x')
    return "no echo (recv gave " + std::to_string(n) + ": " + (n < 0 ? std::strerror(errno) : "eof") + ")";
  if (!half_close) return {};
  const ssize_t n = recv_retry(fd, &c);
  return n == 0 ? std::string{} : "no EOF (recv gave " + std::to_string(n) + ")";
}

/// The lowest fd number not in use (what the next socket would get).
int lowest_free_fd() {
  const int fd = ::dup(0);
  ::close(fd);
  return fd;
}

}  // namespace

TEST_CASE("uring server: half-closed clients see EOF while the server still runs; fds come back", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  constexpr int k_clients = 500;
  if (weft_io_test::raise_fd_limit() < 2 * k_clients + 100) {
    WARN("SKIPPED: the fd limit is below " << 2 * k_clients + 100);
    return;
  }
  wio::tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
  const wio::endpoint ep = l.local_endpoint();
  const std::size_t fds_before = weft_io_test::fd_count();
  std::atomic<int> accept_errors{0};
  auto server = weft::spawn(serve(*io, l, accept_errors)).run_on(*io).fork();

  std::vector<int> clients;
  for (int i = 0; i < k_clients; ++i) {
    clients.push_back(plain_socket());
    REQUIRE(plain_connect(clients.back(), ep));
  }
  failures fail;
  for (int fd : clients)
    if (auto why = echo_then_eof(fd, true); !why.empty()) fail.add(why);
  INFO(fail.m_count << " clients failed; first: " << fail.m_first);
  CHECK(fail.m_count == 0);  // every echo task ended and closed its socket, unjoined
  for (int fd : clients) ::close(fd);
  // The server holds nothing of them (its close() shuts a socket down, which a client
  // sees as EOF, just before closing the fd: a bounded wait for the last ones).
  CHECK(weft_io_test::settled_fd_count(fds_before) == fds_before);

  weft::sync_wait(*io, [&]() -> weft::task<void> {
    l.close();
    co_return;
  }());
  weft::sync_wait(*io, [&]() -> weft::task<void> { co_await server; }());
  CHECK(accept_errors == 0);
}

TEST_CASE("uring server: out of descriptors, accept fails, the server backs off and serves everyone", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  constexpr int k_clients = 40;
  wio::tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
  const wio::endpoint ep = l.local_endpoint();
  std::vector<int> clients;
  for (int i = 0; i < k_clients; ++i) clients.push_back(plain_socket());  // before the limit drops

  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit low = saved;
  // New descriptors must be numbered below the limit: at most 4 left for the server.
  low.rlim_cur = static_cast<rlim_t>(lowest_free_fd() + 4);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);

  std::atomic<int> accept_errors{0};
  auto server = weft::spawn(serve(*io, l, accept_errors)).run_on(*io).fork();
  failures fail;
  for (int fd : clients)
    if (!plain_connect(fd, ep)) fail.add("connect failed");  // all queued at once
  // No client is served before the server ran out: else a server that keeps pace with
  // the clients below (each served, then closed, before its next accept) never would.
  // It can: it holds every connection it accepted until its client is served.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (accept_errors.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int fd : clients) {  // in accept order: each one served frees a descriptor
    if (auto why = echo_then_eof(fd, false); !why.empty()) fail.add(why);
    ::close(fd);
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
  INFO(fail.m_count << " clients failed; first: " << fail.m_first);
  CHECK(fail.m_count == 0);
  CHECK(accept_errors > 0);  // EMFILE was really hit, and survived

  weft::sync_wait(*io, [&]() -> weft::task<void> {
    l.close();
    co_return;
  }());
  weft::sync_wait(*io, [&]() -> weft::task<void> { co_await server; }());
}
