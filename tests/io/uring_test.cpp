// The io_uring backend: echo under load with resets, timers, timeouts, cancellation,
// errors, executor behaviour and fd hygiene. Skipped (with a WARN naming the cause)
// where io_uring is unavailable.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../../io/src/uring_impl.hpp"  // uring_impl::stop, to end the loop before destruction
#include "io_support.hpp"
#include "sync.hpp"

using namespace std::chrono_literals;
using weft::io::endpoint;
using weft::io::tcp_listener;
using weft::io::tcp_stream;
using weft::io::uring_context;
using weft_io_test::completion_count;
using weft_io_test::failures;
using weft_io_test::k_message;

namespace {

// with_timeout and with_cancel move the ring operation into their result, so they take
// rvalues only: a named operation passed without std::move must not compile (it would
// be left empty unseen).
using read_op = weft::io::detail::transfer_awaitable;
template <class A>
concept timeout_accepts = requires(A&& a) { weft::io::with_timeout(std::forward<A>(a), 1ms); };
template <class A>
concept cancel_accepts =
    requires(A&& a, const weft::io::cancel_source& s) { weft::io::with_cancel(std::forward<A>(a), s); };
static_assert(timeout_accepts<read_op> && !timeout_accepts<read_op&> && !timeout_accepts<const read_op&>);
static_assert(cancel_accepts<read_op> && !cancel_accepts<read_op&>);
static_assert(cancel_accepts<weft::io::detail::sleep_awaitable> && !cancel_accepts<weft::io::detail::sleep_awaitable&>);

struct server_stats {
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::size_t> eofs{0};
  std::atomic<std::size_t> resets{0};
  std::atomic<std::size_t> other_errors{0};
  completion_count sessions_done;
};

weft::task<void> echo_session(tcp_stream s, server_stats& st) {
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await s.read_some(buf, sizeof buf);
    if (ec) {
      if (ec == weft::io::error::eof)
        st.eofs.fetch_add(1);
      else if (ec == std::errc::connection_reset)
        st.resets.fetch_add(1);
      else
        st.other_errors.fetch_add(1);
      break;
    }
    st.bytes.fetch_add(n);
    auto [ec2, m] = co_await s.write_all(buf, n);
    if (ec2 || m != n) {
      if (ec2 == std::errc::connection_reset || ec2 == std::errc::broken_pipe)
        st.resets.fetch_add(1);
      else
        st.other_errors.fetch_add(1);
      break;
    }
  }
  st.sessions_done.arrive();
}

weft::task<void> accept_loop(uring_context& ctx, tcp_listener& l, std::size_t n, server_stats& st, failures& f) {
  for (std::size_t i = 0; i < n; ++i) {
    auto [ec, s] = co_await l.accept();
    if (ec) {
      f.add("accept: " + ec.message());
      st.sessions_done.arrive();
      continue;
    }
    weft::post(ctx, echo_session(std::move(s), st));
  }
}

struct client_outcome {
  std::size_t echoed = 0;  // messages sent and verified
  bool reset = false;
};

weft::task<client_outcome> echo_client(uring_context& ctx, endpoint ep, std::uint32_t id, std::size_t messages,
                                       bool reset_halfway, failures& f) {
  client_outcome out;
  tcp_stream s(ctx);
  if (auto ec = co_await s.connect(ep)) {
    f.add("connect: " + ec.message());
    co_return out;
  }
  char msg[k_message], back[k_message];
  for (std::size_t k = 0; k < messages; ++k) {
    if (reset_halfway && k == messages / 2) {
      const linger hard{1, 0};  // close with RST
      const int fd = s.release();
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
      ::close(fd);
      out.reset = true;
      co_return out;
    }
    weft_io_test::fill_message(msg, id, static_cast<std::uint32_t>(k));
    auto [e1, n1] = co_await s.write_all(msg, sizeof msg);
    if (e1 || n1 != sizeof msg) {
      f.add("client write: " + e1.message());
      co_return out;
    }
    std::size_t got = 0;
    while (got < sizeof back) {
      auto [e2, n2] = co_await s.read_some(back + got, sizeof back - got);
      if (e2) {
        f.add("client read: " + e2.message());
        co_return out;
      }
      got += n2;
    }
    if (std::memcmp(msg, back, sizeof msg) != 0) {
      f.add("echo differs");
      co_return out;
    }
    ++out.echoed;
  }
  s.shutdown(SHUT_WR);
  co_return out;
}

weft::task<std::vector<client_outcome>> all_clients(uring_context& ctx, endpoint ep, std::size_t conns,
                                                    std::size_t messages, std::size_t reset_every, failures& f) {
  std::vector<weft::task<client_outcome>> ts;
  for (std::size_t i = 0; i < conns; ++i)
    ts.push_back(
        echo_client(ctx, ep, static_cast<std::uint32_t>(i), messages, reset_every != 0 && i % reset_every == 0, f));
  co_return co_await weft::spawn_many(std::move(ts));
}

// One echo run: server on `server`, clients on `clients` (any executor).
void run_echo(uring_context& server, weft::executor& clients, uring_context& client_io, std::size_t conns,
              std::size_t messages, std::size_t reset_every) {
  server_stats st;
  failures f;
  tcp_listener l(server);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const endpoint ep = l.local_endpoint();
  REQUIRE(ep.port() != 0);
  weft::post(server, accept_loop(server, l, conns, st, f));

  auto outcomes = weft::sync_wait(clients, all_clients(client_io, ep, conns, messages, reset_every, f));
  REQUIRE(st.sessions_done.wait_for(conns, 60s));
  l.close();

  INFO("first failure: " << f.m_first);
  CHECK(f.m_count == 0);
  std::size_t resets = 0, echoed = 0, expected = 0;
  for (std::size_t i = 0; i < conns; ++i) {
    const bool r = reset_every != 0 && i % reset_every == 0;
    CHECK(outcomes[i].reset == r);
    const std::size_t want = r ? messages / 2 : messages;
    if (outcomes[i].echoed != want)
      FAIL_CHECK("connection " << i << " echoed " << outcomes[i].echoed << " of " << want);
    resets += r;
    echoed += outcomes[i].echoed;
    expected += want;
  }
  CHECK(echoed == expected);
  CHECK(st.bytes.load() == expected * k_message);  // every byte sent reached the server once
  CHECK(st.resets.load() == resets);
  CHECK(st.eofs.load() == conns - resets);
  CHECK(st.other_errors.load() == 0);
}

}  // namespace

TEST_CASE("uring: echo, 1000 connections x 100 messages, 10% reset half-way", "[uring]") {
  weft_io_test::raise_fd_limit();
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto server = weft_io_test::make_uring_or_skip();
    if (!server) return;
    auto clients = weft_io_test::make_uring_or_skip();
    INFO("multishot accept: " << server->has_multishot_accept());
    run_echo(*server, *clients, *clients, 1000, 100, 10);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("uring: the kernel-feature options run the paths of an older kernel", "[uring]") {
  // Each feature turned off alone, on a uring_context and an io_pool: no multishot
  // accept, and the same echo serves every byte.
  weft_io_test::raise_fd_limit();
  const std::size_t fds_before = weft_io_test::fd_count();
  for (const weft::io::uring_options o :
       {weft::io::uring_options{.single_issuer = false}, weft::io::uring_options{.multishot_accept = false}}) {
    INFO("single_issuer " << o.single_issuer << ", multishot_accept " << o.multishot_accept);
    auto server = weft_io_test::make_uring_or_skip(o);
    if (!server) return;
    CHECK_FALSE(server->has_multishot_accept());
    auto clients = weft_io_test::make_uring_or_skip();
    run_echo(*server, *clients, *clients, 200, 20, 10);
    weft::io::io_pool pool({.threads = 2}, o);
    CHECK_FALSE(pool.has_multishot_accept());
    run_echo(pool, pool, *clients, 200, 20, 10);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("uring: pool tasks await uring operations and resume on the pool", "[uring]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    auto server = weft_io_test::make_uring_or_skip();
    weft::thread_pool pool{{.threads = 2}};
    run_echo(*server, pool, *io, 200, 30, 0);

    // Every resumption lands back on the pool.
    std::atomic<int> off_pool{0};
    auto body = [&]() -> weft::task<int> {
      int n = 0;
      for (int i = 0; i < 20; ++i) {
        auto ec = co_await weft::io::sleep_for(*io, 100us);
        if (!ec && pool.owns_current_thread())
          ++n;
        else
          off_pool.fetch_add(1);
      }
      co_return n;
    };
    CHECK(weft::sync_wait(pool, body()) == 20);
    CHECK(off_pool.load() == 0);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("uring: sleep_for, sleep_until and the loop's own tasks", "[uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  auto body = [&]() -> weft::task<bool> {
    const auto t0 = std::chrono::steady_clock::now();
    auto ec = co_await weft::io::sleep_for(*io, 20ms);
    const auto t1 = std::chrono::steady_clock::now();
    auto ec2 = co_await weft::io::sleep_until(*io, t1 + 10ms);
    const auto t2 = std::chrono::steady_clock::now();
    co_return !ec && !ec2 && t1 - t0 >= 20ms && t2 - t1 >= 10ms && io->owns_current_thread();
  };
  CHECK(weft::sync_wait(*io, body()));
  CHECK_THROWS_AS(weft::sync_wait(*io, body(), 7), std::out_of_range);
}

TEST_CASE("uring: timeouts and cancellation", "[uring]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
    const endpoint ep = l.local_endpoint();

    auto body = [&]() -> weft::task<void> {
      tcp_stream c(*io);
      auto r1 =
          co_await c.connect(ep);  // outside the macro: g++-12 evaluates a co_await operand of Catch's macros twice
      REQUIRE_FALSE(r1);
      auto [ec, s] = co_await l.accept();
      REQUIRE_FALSE(ec);
      char buf[16];

      // A read nobody answers times out.
      auto t0 = std::chrono::steady_clock::now();
      auto [e1, n1] = co_await weft::io::with_timeout(s.read_some(buf, sizeof buf), 50ms);
      auto waited = std::chrono::steady_clock::now() - t0;
      CHECK(e1 == std::errc::timed_out);
      CHECK(e1 == weft::io::error::timed_out);
      CHECK(n1 == 0);
      CHECK(waited >= 45ms);
      CHECK(waited < 5s);

      // One that is answered in time is not disturbed by its timeout.
      auto [e2, n2] = co_await c.write_all("hello", 5);
      CHECK_FALSE(e2);
      auto [e3, n3] = co_await weft::io::with_timeout(s.read_some(buf, sizeof buf), 5s);
      CHECK_FALSE(e3);
      CHECK(n3 == 5);
      CHECK(std::memcmp(buf, "hello", 5) == 0);
      (void)n2;
    };
    weft::sync_wait(*io, body());

    // cancel() from another thread ends a pending read with operation_canceled.
    tcp_stream c(*io);
    auto connect_it = [&]() -> weft::task<std::error_code> { co_return co_await c.connect(ep); };
    REQUIRE_FALSE(weft::sync_wait(*io, connect_it()));
    auto accept_it = [&]() -> weft::task<weft::io::accept_result> { co_return co_await l.accept(); };
    auto [aec, s] = weft::sync_wait(*io, accept_it());
    REQUIRE_FALSE(aec);
    weft::thread_pool pool{{.threads = 1}};
    std::atomic<bool> reading{false};
    auto reader = [&]() -> weft::task<std::error_code> {
      char buf[8];
      reading.store(true);
      auto [ec, n] = co_await s.read_some(buf, sizeof buf);
      co_return ec;
    };
    auto h = std::thread([&] {
      while (!reading.load()) std::this_thread::yield();
      weft_io_test::round_trip(pool);  // the reader suspended: its read is queued to the loop
      weft_io_test::round_trip(*io);   // the read is submitted before the cancel is taken
      s.cancel();
    });
    auto ec = weft::sync_wait(pool, reader());
    h.join();
    CHECK(ec == std::errc::operation_canceled);

    // Closing the listener ends a pending accept. (Both run on the loop thread, in
    // this order: the accept is pending when close() runs.)
    completion_count accept_ended;
    std::error_code aec2;
    auto accept_one = [&]() -> weft::task<void> {  // named: the closure outlives the task
      auto [e, st] = co_await l.accept();
      aec2 = e;
      accept_ended.arrive();
    };
    weft::post(*io, accept_one());
    weft::sync_wait(*io, [&]() -> weft::task<void> {
      l.close();
      co_return;
    }());
    REQUIRE(accept_ended.wait_for(1, 10s));
    CHECK(aec2 == std::errc::operation_canceled);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("uring: refused connections, invalid addresses, EOF", "[uring]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    // A port nobody listens on: bind one, then close it.
    std::uint16_t closed_port = 0;
    {
      tcp_listener l(*io);
      REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
      closed_port = l.local_endpoint().port();
    }
    auto body = [&]() -> weft::task<void> {
      tcp_stream s(*io);
      auto ec = co_await s.connect(endpoint::loopback(closed_port));
      CHECK(ec == std::errc::connection_refused);
      CHECK_FALSE(s.is_open());
      auto r2 = co_await s.connect("999.1.2.3", 80);
      CHECK(r2 == std::errc::invalid_argument);
      auto r3 = co_await s.connect("not an address", 80);
      CHECK(r3 == std::errc::invalid_argument);
      auto r4 = co_await s.connect("127.0.0.1", 0);
      CHECK(r4 == std::errc::invalid_argument);
      auto r5 = co_await s.connect(endpoint{});
      CHECK(r5 == std::errc::invalid_argument);

      tcp_listener l(*io);
      CHECK(l.listen(endpoint{}) == std::errc::invalid_argument);
      auto [e0, none] = co_await l.accept();
      CHECK(e0 == std::errc::bad_file_descriptor);
      REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
      auto ep = l.local_endpoint();
      CHECK(ep.to_string() == "127.0.0.1:" + std::to_string(ep.port()));
      tcp_listener l2(*io);
      CHECK(l2.listen(ep) == std::errc::address_in_use);

      // EOF after the peer shut down its side; the server side can still write.
      tcp_stream c(*io);
      auto r6 = co_await c.connect(ep);
      REQUIRE_FALSE(r6);
      auto [e1, srv] = co_await l.accept();
      REQUIRE_FALSE(e1);
      CHECK_FALSE(c.shutdown(SHUT_WR));
      char buf[4];
      auto [e2, n2] = co_await srv.read_some(buf, sizeof buf);
      CHECK(e2 == weft::io::error::eof);
      CHECK(n2 == 0);
      auto [e3, n3] = co_await srv.write_all("ok", 2);
      CHECK_FALSE(e3);
      auto [e4, n4] = co_await c.read_some(buf, sizeof buf);
      CHECK_FALSE(e4);
      CHECK(n4 == 2);
      (void)n3;
    };
    weft::sync_wait(*io, body());
    std::error_code ec;
    CHECK(endpoint::parse("::1", 5, ec).to_string() == "[::1]:5");
    CHECK_FALSE(ec);
    endpoint::parse("1.2.3", 5, ec);
    CHECK(ec == std::errc::invalid_argument);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("uring: with_cancel on sleeps and reads, from any thread", "[uring]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::thread_pool pool{{.threads = 1}};

    // A long sleep cancelled from another thread ends early with operation_canceled.
    weft::io::cancel_source stop;
    std::atomic<bool> sleeping{false};
    auto sleeper = [&]() -> weft::task<std::error_code> {
      sleeping.store(true);
      co_return co_await weft::io::with_cancel(weft::io::sleep_for(*io, 30s), stop);
    };
    std::thread canceller([&] {
      while (!sleeping.load()) std::this_thread::yield();
      weft_io_test::round_trip(pool);  // the sleeper suspended: its sleep is queued to the loop
      weft_io_test::round_trip(*io);   // the sleep is submitted, its token watched
      stop.request_cancel();
    });
    const auto t0 = std::chrono::steady_clock::now();
    const auto ec = weft::sync_wait(pool, sleeper());
    canceller.join();
    CHECK(ec == std::errc::operation_canceled);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);

    // Already cancelled: a read with no data ends at once; on the loop thread too.
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
    auto body = [&]() -> weft::task<void> {
      tcp_stream c(*io);
      auto r7 = co_await c.connect(l.local_endpoint());
      REQUIRE_FALSE(r7);
      auto [aec, s] = co_await l.accept();
      REQUIRE_FALSE(aec);
      char buf[8];
      auto [e1, n1] = co_await weft::io::with_cancel(s.read_some(buf, sizeof buf), stop);
      CHECK(e1 == std::errc::operation_canceled);
      CHECK(n1 == 0);
      // Not cancelled: the operation's own result, also under a timeout.
      weft::io::cancel_source idle;
      auto r8 = co_await weft::io::with_cancel(weft::io::sleep_for(*io, 1ms), idle);
      CHECK_FALSE(r8);
      auto [e2, n2] = co_await c.write_all("abc", 3);
      CHECK_FALSE(e2);
      auto [e3, n3] = co_await weft::io::with_cancel(weft::io::with_timeout(s.read_some(buf, sizeof buf), 5s), idle);
      CHECK_FALSE(e3);
      CHECK(n3 == 3);
      // Cancelled while pending, by a task of the loop itself.
      weft::io::cancel_source later;
      auto canceller_task = [&]() -> weft::task<void> {
        co_await weft::io::sleep_for(*io, 10ms);
        later.request_cancel();
      };
      auto h = weft::spawn(canceller_task()).fork();
      auto [e4, n4] = co_await weft::io::with_cancel(s.read_some(buf, sizeof buf), later);
      co_await h;
      CHECK(e4 == std::errc::operation_canceled);
      (void)n2;
      (void)n4;
    };
    weft::sync_wait(*io, body());
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

namespace {

// In a child process: forbid io_uring_setup with EPERM (a seccomp filter, as container
// runtimes install), then check the constructor's error and that Asio still works.
// Exit codes: 0 ok, 2 no exception, 3 wrong code, 4 message without the cause, 5 Asio
// failed, 6 seccomp could not be installed (the parent then skips).
[[noreturn]] void child_without_io_uring() {
  if (!weft_io_test::forbid_io_uring_setup()) ::_exit(6);
  int code = 2;
  try {
    weft::io::uring_context io;
  } catch (const weft::io::uring_unavailable& e) {
    const std::string what = e.what();
    if (e.code() != std::errc::operation_not_permitted)
      code = 3;
    else if (what.find("EPERM") == std::string::npos || what.find("seccomp") == std::string::npos)
      code = 4;
    else
      code = 0;
  }
  if (code == 0) {
    weft::io::asio_executor asio_io;
    auto answer = []() -> weft::task<int> { co_return 42; };
    if (weft::sync_wait(asio_io, answer()) != 42) code = 5;
  }
  ::_exit(code);
}

}  // namespace

TEST_CASE("uring: unavailable io_uring is a clear error; Asio keeps working", "[uring]") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) child_without_io_uring();
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the child without io_uring did not finish in 30 s");
    }
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 6) {
    WARN("SKIPPED: cannot install a seccomp filter here");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("uring: once destruction began, an operation from another thread is refused, not lost", "[uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  weft::io::uring_context* ctx = io.get();  // alive until its destructor returns
  weft::thread_pool pool{{.threads = 1}};
  std::atomic<bool> release{false};
  // Holds the loop thread inside one of its tasks while the destructor runs.
  weft::post(*ctx, [](std::atomic<bool>& r) -> weft::task<void> {
    while (!r.load()) std::this_thread::yield();
    co_return;
  }(release));
  std::thread destroyer([&] { io.reset(); });
  // Destruction began once a post is refused.
  for (;;) {
    try {
      weft::post(*ctx, []() -> weft::task<void> { co_return; }());
    } catch (const weft::shutdown_error&) {
      break;
    }
    std::this_thread::yield();
  }
  // An operation started by a task on another executor now: shutdown_error at once
  // (queued instead, it would start after the loop's last turn and never complete).
  CHECK_THROWS_AS(weft::sync_wait(pool,
                                  [](weft::io::uring_context& c) -> weft::task<std::error_code> {
                                    co_return co_await weft::io::sleep_for(c, 1ms);
                                  }(*ctx)),
                  weft::shutdown_error);
  release = true;
  destroyer.join();
}

TEST_CASE("uring: a listener closed from another thread after the loop ended is released with the context", "[uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const endpoint ep = l.local_endpoint();
  weft::io::detail::uring_access::ring(*io, 0).stop();  // the loop has ended; the context is still alive
  l.close();                                            // from this thread: queued for a loop that will never run it
  {
    tcp_listener again(*io);
    CHECK(again.listen(ep) == std::errc::address_in_use);  // still open: the close waits
  }
  io.reset();  // the destructor releases it (ASan: nothing leaked)
  auto io2 = weft_io_test::make_uring_or_skip();
  REQUIRE(io2);
  tcp_listener again(*io2);
  CHECK_FALSE(again.listen(ep));  // the port is free again: the socket was closed
}

// The span forms: a const span cannot be read into; any trivially copyable element type
// counts in bytes.
template <class S>
concept readable_into = requires(tcp_stream& s, S buf) { s.read_some(buf); };
static_assert(readable_into<std::span<char>> && readable_into<std::span<std::byte, 8>> &&
              readable_into<std::span<std::uint32_t>>);
static_assert(!readable_into<std::span<const char>>);

TEST_CASE("uring: span forms of read_some, write_some and write_all", "[uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  auto body = [&]() -> weft::task<void> {
    tcp_stream c(*io);
    const std::error_code ce = co_await c.connect(l.local_endpoint());  // not inside a Catch macro (g++-12)
    REQUIRE_FALSE(ce);
    auto [ae, s] = co_await l.accept();
    REQUIRE_FALSE(ae);
    const std::uint32_t words[3] = {1, 2, 0xdeadbeef};
    auto [e1, n1] = co_await c.write_all(std::span(words));
    CHECK_FALSE(e1);
    CHECK(n1 == sizeof words);
    const std::string text = "span";
    auto [e2, n2] = co_await c.write_some(std::span(text.data(), text.size()));
    CHECK_FALSE(e2);
    CHECK(n2 == 4);
    std::vector<std::byte> got(sizeof words + 4);
    for (std::size_t have = 0; have < got.size();) {
      auto [e3, n3] = co_await s.read_some(std::span(got).subspan(have));
      REQUIRE_FALSE(e3);
      have += n3;
    }
    CHECK(std::memcmp(got.data(), words, sizeof words) == 0);
    CHECK(std::memcmp(got.data() + sizeof words, "span", 4) == 0);
  };
  weft::sync_wait(*io, body());
}
