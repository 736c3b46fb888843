// A socket closed while one of its operations is pending (prepared, queued or in flight)
// must not let that operation run on another socket that reuses the fd number: the
// number stays open until the operation ended (weft/io/detail/descriptor.hpp), and the
// operation ends with error::cancelled. Over an io_pool, a uring_context's own loop, and
// tasks on a thread_pool whose operations are handed to a uring_context; then a duplex
// server (a reader and a writer task per connection, one closing under the other) under
// connect churn, where every byte says whose it is.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/io/tcp.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/scope.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

namespace wio = weft::io;
using namespace std::chrono_literals;

namespace {

constexpr char k_secret[] = "SECRET-OF-ANOTHER-CLIENT";

struct read_outcome {
  std::error_code ec;
  std::string bytes;
};

/// Posts `then` to `ex` (it runs once this task is suspended in the read, on a
/// one-thread executor), then reads `a`.
weft::task<void> read_once(weft::executor& ex, wio::tcp_stream& a, read_outcome& out, weft::task<void> then) {
  char buf[64];
  weft::post(ex, std::move(then));
  auto [ec, n] = co_await a.read_some(buf, sizeof buf);
  out.ec = ec;
  out.bytes.assign(buf, n);
}

/// Closes `a`, then makes a socket pair (which takes the lowest free numbers: `a`'s, if
/// it was closed) and writes the secret into the end that has `a`'s old number, from
/// its peer. Returns the pair's fds in `made`.
weft::task<void> close_and_reuse(wio::tcp_stream& a, int (&made)[2], int& a_fd) {
  a_fd = a.native_handle();
  a.close();
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, made) == 0);
  // Whichever end got the number: the other one writes the secret into it.
  const int writer = made[0] == a_fd ? made[1] : made[0];
  REQUIRE(::write(writer, k_secret, sizeof k_secret - 1) == static_cast<ssize_t>(sizeof k_secret - 1));
  co_return;
}

/// Task 1 reads `a` (its operation prepared, not yet submitted); task 2, queued behind
/// it on the same thread, closes `a` and makes a socket that may reuse its number.
void reuse_race(weft::executor& ex, wio::uring_context& io) {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  read_outcome got;
  int made[2] = {-1, -1};
  int a_fd = -1;
  {
    wio::tcp_stream a(io, pair[0]);  // its peer, pair[1], never writes
    weft::sync_wait(ex, read_once(ex, a, got, close_and_reuse(a, made, a_fd)));
  }
  INFO("the read returned '" << got.ec.message() << "' with " << got.bytes.size() << " bytes: '" << got.bytes
                             << "'; the new pair is " << made[0] << ", " << made[1] << ", the closed fd was " << a_fd);
  CHECK(got.bytes.find("SECRET") == std::string::npos);
  CHECK(got.ec == wio::error::cancelled);
  CHECK(got.ec == std::errc::operation_canceled);
  ::close(made[0]);
  ::close(made[1]);
  ::close(pair[1]);
}

}  // namespace

TEST_CASE("close race: a read pending on a closed socket never reads the socket that reuses its fd", "[io][close]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  SECTION("a 1-worker io_pool") {
    auto pool = weft_io_test::make_io_pool_or_skip(1);
    if (!pool) return;
    for (int i = 0; i < 3; ++i) reuse_race(*pool, *pool);
  }
  SECTION("a uring_context's own loop") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    for (int i = 0; i < 3; ++i) reuse_race(*io, *io);
  }
  SECTION("tasks on a 1-thread pool, operations handed to a uring_context") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::thread_pool pool{{.threads = 1}};
    for (int i = 0; i < 20; ++i) reuse_race(pool, *io);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

namespace {

weft::task<void> write_once(weft::executor& ex, wio::tcp_stream& a, bool all, std::error_code& out,
                            weft::task<void> then) {
  static constexpr char k_mine[] = "bytes-of-the-first-client";
  weft::post(ex, std::move(then));  // runs once this task is suspended in the write
  if (all) {
    auto [ec, n] = co_await a.write_all(k_mine, sizeof k_mine - 1);
    out = ec;
  } else {
    auto [ec, n] = co_await a.write_some(k_mine, sizeof k_mine - 1);
    out = ec;
  }
}

weft::task<void> close_and_make(wio::tcp_stream& a, int (&made)[2]) {
  a.close();
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, made) == 0);
  co_return;
}

}  // namespace

TEST_CASE("close race: a write pending on a closed socket never reaches the socket that reuses its fd", "[io][close]") {
  auto pool = weft_io_test::make_io_pool_or_skip(1);
  if (!pool) return;
  const std::size_t fds_before = weft_io_test::fd_count();
  for (const bool all : {false, true}) {
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
    std::error_code ec;
    int made[2] = {-1, -1};
    {
      wio::tcp_stream a(*pool, pair[0]);
      weft::sync_wait(*pool, write_once(*pool, a, all, ec, close_and_make(a, made)));
    }
    // Nothing arrived at either end of the new pair.
    for (int fd : made) {
      char c;
      CHECK(::recv(fd, &c, 1, MSG_DONTWAIT) < 0);
      CHECK(errno == EAGAIN);
    }
    INFO((all ? "write_all" : "write_some") << ": " << ec.message());
    CHECK(ec == wio::error::cancelled);
    ::close(made[0]);
    ::close(made[1]);
    ::close(pair[1]);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("close race: an operation made before a close or a move over, awaited after, is cancelled", "[io][close]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  int p[2], q[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, q) == 0);
  REQUIRE(::write(q[1], "other", 5) == 5);  // waiting in the stream moved over the first
  wio::tcp_stream s(*io, p[0]);
  auto outcome = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
    char buf[16];
    auto r = s.read_some(buf, sizeof buf);  // names the first socket
    s = wio::tcp_stream(*io, q[0]);         // closes it; s now holds the second
    auto [ec, n] = co_await r;
    CHECK(n == 0);
    co_return ec;
  }());
  CHECK(outcome == wio::error::cancelled);
  // A stream without a socket: bad_file_descriptor, nothing submitted.
  wio::tcp_stream none(*io);
  auto [none_ec, none_n] = weft::sync_wait(*io, [&]() -> weft::task<wio::io_result> {
    char buf[4];
    co_return co_await none.read_some(buf, sizeof buf);
  }());
  CHECK(none_ec == std::errc::bad_file_descriptor);
  CHECK(none_n == 0);
  // The second socket's bytes are still there for s.
  auto [ec, n] = weft::sync_wait(*io, [&]() -> weft::task<wio::io_result> {
    char buf[16];
    co_return co_await s.read_some(buf, sizeof buf);
  }());
  CHECK_FALSE(ec);
  CHECK(n == 5);
  ::close(p[1]);
  ::close(q[1]);
}

// ---- a duplex server under churn ------------------------------------------------------

namespace {

/// Every message: 8 bytes of the connection's tag, then 56 derived from it and the index.
constexpr std::size_t k_msg = 64;
void make_msg(char* out, std::uint64_t tag, std::uint32_t i) {
  std::memcpy(out, &tag, 8);
  for (std::size_t b = 8; b < k_msg; ++b) out[b] = static_cast<char>((tag * 31 + i * 7 + b) & 0xff);
}
/// True when `m` is a message of `tag` (any index).
bool is_msg_of(const char* m, std::uint64_t tag) {
  std::uint64_t t;
  std::memcpy(&t, m, 8);
  return t == tag;
}

struct duplex_stats {
  std::atomic<long> foreign{0};  // bytes that carried another connection's tag
  std::atomic<long> served{0};
  std::atomic<long> ok_msgs{0};
};

/// The server's writer half: sends the tag's messages until the stream is closed.
weft::task<void> writer(wio::tcp_stream& s, std::uint64_t tag) {
  char m[k_msg];
  for (std::uint32_t i = 0;; ++i) {
    make_msg(m, tag, i);
    auto [ec, n] = co_await s.write_all(m, k_msg);
    if (ec) co_return;
  }
}

/// One connection: the client first sends its 8-byte tag; then a writer task sends the
/// client messages with that tag, while this task reads the client's messages (also
/// tagged) and checks each, and closes the stream after a few under the writer.
weft::task<void> serve(wio::tcp_stream s, duplex_stats& st) {
  std::uint64_t tag = 0;
  {
    char t[8];
    std::size_t got = 0;
    while (got < 8) {
      auto [ec, n] = co_await s.read_some(t + got, 8 - got);
      if (ec) co_return;
      got += n;
    }
    std::memcpy(&tag, t, 8);
  }
  auto w = weft::spawn(writer(s, tag)).fork();
  char m[k_msg];
  std::size_t have = 0;
  for (int msgs = 0; msgs < 20;) {
    auto [ec, n] = co_await s.read_some(m + have, k_msg - have);
    if (ec) break;
    have += n;
    if (have < k_msg) continue;
    have = 0;
    ++msgs;
    if (!is_msg_of(m, tag)) st.foreign.fetch_add(1);
  }
  s.close();  // the writer's write_all is pending or about to be
  co_await w;
  st.served.fetch_add(1);
}

weft::task<void> accept_loop(wio::tcp_listener& l, weft::scope<>& conns, duplex_stats& st) {
  for (;;) {
    auto [ec, s] = co_await l.accept();
    if (ec) co_return;
    conns.spawn(serve, std::move(s), std::ref(st));
  }
}

/// A blocking client on its own thread: connects, sends its tag, then reads what the
/// server sends (checking the tag of every whole message) while sending 20 messages.
void client(const wio::endpoint& at, std::uint64_t tag, duplex_stats& st) {
  const int fd = weft_io_test::connect_plain(at);
  if (fd < 0) return;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::send(fd, &tag, 8, MSG_NOSIGNAL) != 8) {
    ::close(fd);
    return;
  }
  char m[k_msg];
  for (std::uint32_t i = 0; i < 20; ++i) {
    make_msg(m, tag, i);
    if (::send(fd, m, k_msg, MSG_NOSIGNAL) != static_cast<ssize_t>(k_msg)) break;
  }
  std::size_t have = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, m + have, k_msg - have, 0);
    if (n <= 0) break;
    have += static_cast<std::size_t>(n);
    if (have < k_msg) continue;
    have = 0;
    if (is_msg_of(m, tag))
      st.ok_msgs.fetch_add(1);
    else
      st.foreign.fetch_add(1);
  }
  ::close(fd);
}

}  // namespace

TEST_CASE("close race: duplex handlers closing under connect churn: every byte reaches its owner", "[io][close]") {
  weft_io_test::raise_fd_limit();
  const std::size_t fds_before = weft_io_test::fd_count();
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  duplex_stats st;
  constexpr int k_threads = 4, k_per_thread = 100;
  {
    wio::tcp_listener l(*io, 0);
    REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
    const wio::endpoint at = l.local_endpoint();
    std::stop_source stop_accepting;
    std::thread server([&] {
      weft::sync_wait(*io, [&]() -> weft::task<void> {
        weft::scope<> conns;
        {
          weft::scope<> acceptor{stop_accepting.get_token()};  // its accept ends with the stop
          acceptor.spawn(accept_loop, std::ref(l), std::ref(conns), std::ref(st));
          co_await acceptor.join();
        }
        co_await conns.join();
      }());
    });
    std::vector<std::thread> clients;
    for (int t = 0; t < k_threads; ++t)
      clients.emplace_back([&, t] {
        for (int i = 0; i < k_per_thread; ++i)
          client(at, (std::uint64_t{0x5eed} << 32) | static_cast<std::uint64_t>(t * k_per_thread + i + 1), st);
      });
    for (auto& c : clients) c.join();
    stop_accepting.request_stop();
    server.join();
  }
  io.reset();  // the listener's close ran on its ring by now
  INFO("served " << st.served.load() << ", whole messages at clients " << st.ok_msgs.load());
  CHECK(st.foreign.load() == 0);
  CHECK(st.served.load() == k_threads * k_per_thread);
  CHECK(st.ok_msgs.load() > 0);
  CHECK(weft_io_test::fd_count() == fds_before);
}
