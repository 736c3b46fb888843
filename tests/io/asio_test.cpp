// The Asio bridge: asio_executor as a weft executor, the use_task token over plain and
// composed operations, with_timeout / with_cancel, errors, and an echo run under load
// with resets, with fd hygiene; Asio's resolver, signal_set, UDP and local sockets
// against the native types, reporting the same error codes.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io_support.hpp"
#include "sync.hpp"

using namespace std::chrono_literals;
using asio::ip::tcp;
using weft::io::asio_executor;
using weft::io::use_task;
using weft_io_test::completion_count;
using weft_io_test::failures;
using weft_io_test::k_message;

namespace {

tcp::endpoint loopback(unsigned short port) { return {asio::ip::address_v4::loopback(), port}; }

// ---- echo under load ------------------------------------------------------------------------

struct server_stats {
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::size_t> eofs{0};
  std::atomic<std::size_t> resets{0};
  std::atomic<std::size_t> other_errors{0};
  completion_count sessions_done;
};

weft::task<void> echo_session(tcp::socket s, server_stats& st) {
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_task);
    if (ec) {
      if (ec == weft::io::error::eof)
        st.eofs.fetch_add(1);  // use_task: weft's categories
      else if (ec == std::errc::connection_reset)
        st.resets.fetch_add(1);
      else
        st.other_errors.fetch_add(1);
      break;
    }
    st.bytes.fetch_add(n);
    auto [ec2, m] = co_await asio::async_write(s, asio::buffer(buf, n), use_task);
    if (ec2) {
      if (ec2 == std::errc::connection_reset || ec2 == std::errc::broken_pipe)
        st.resets.fetch_add(1);
      else
        st.other_errors.fetch_add(1);
      break;
    }
    (void)m;
  }
  st.sessions_done.arrive();
}

weft::task<void> accept_loop(asio_executor& io, tcp::acceptor& a, std::size_t n, server_stats& st, failures& f) {
  for (std::size_t i = 0; i < n; ++i) {
    auto [ec, s] = co_await a.async_accept(use_task);
    if (ec) {
      f.add("accept: " + ec.message());
      st.sessions_done.arrive();
      continue;
    }
    weft::post(io, echo_session(std::move(s), st));
  }
}

struct client_outcome {
  std::size_t echoed = 0;
  bool reset = false;
};

weft::task<client_outcome> echo_client(asio_executor& io, tcp::endpoint ep, std::uint32_t id, std::size_t messages,
                                       bool reset_halfway, failures& f) {
  client_outcome out;
  tcp::socket s(io.context());
  if (auto ec = co_await s.async_connect(ep, use_task)) {
    f.add("connect: " + ec.message());
    co_return out;
  }
  char msg[k_message], back[k_message];
  for (std::size_t k = 0; k < messages; ++k) {
    if (reset_halfway && k == messages / 2) {
      s.set_option(asio::socket_base::linger(true, 0));  // close with RST
      s.close();
      out.reset = true;
      co_return out;
    }
    weft_io_test::fill_message(msg, id, static_cast<std::uint32_t>(k));
    auto [e1, n1] = co_await asio::async_write(s, asio::buffer(msg), use_task);
    auto [e2, n2] = co_await asio::async_read(s, asio::buffer(back), use_task);
    if (e1 || e2 || n1 != k_message || n2 != k_message) {
      f.add("client: " + (e1 ? e1 : e2).message());
      co_return out;
    }
    if (std::memcmp(msg, back, sizeof msg) != 0) {
      f.add("echo differs");
      co_return out;
    }
    ++out.echoed;
  }
  s.shutdown(tcp::socket::shutdown_send);
  co_return out;
}

weft::task<std::vector<client_outcome>> all_clients(asio_executor& io, tcp::endpoint ep, std::size_t conns,
                                                    std::size_t messages, std::size_t reset_every, failures& f) {
  std::vector<weft::task<client_outcome>> ts;
  for (std::size_t i = 0; i < conns; ++i)
    ts.push_back(
        echo_client(io, ep, static_cast<std::uint32_t>(i), messages, reset_every != 0 && i % reset_every == 0, f));
  co_return co_await weft::spawn_many(std::move(ts));
}

}  // namespace

TEST_CASE("asio: echo, 1000 connections x 100 messages, 10% reset half-way", "[asio]") {
  weft_io_test::raise_fd_limit();
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    const std::size_t conns = 1000, messages = 100, reset_every = 10;
    asio_executor server, clients;
    server_stats st;
    failures f;
    tcp::acceptor acceptor(server.context(), loopback(0));
    acceptor.listen(asio::socket_base::max_listen_connections);
    const auto ep = loopback(acceptor.local_endpoint().port());
    weft::post(server, accept_loop(server, acceptor, conns, st, f));

    auto outcomes = weft::sync_wait(clients, all_clients(clients, ep, conns, messages, reset_every, f));
    REQUIRE(st.sessions_done.wait_for(conns, 60s));
    weft::sync_wait(server, [&]() -> weft::task<void> {  // the acceptor belongs to the I/O thread
      acceptor.close();
      co_return;
    }());

    INFO("first failure: " << f.m_first);
    CHECK(f.m_count == 0);
    std::size_t resets = 0, echoed = 0, expected = 0;
    for (std::size_t i = 0; i < conns; ++i) {
      const bool r = i % reset_every == 0;
      CHECK(outcomes[i].reset == r);
      const std::size_t want = r ? messages / 2 : messages;
      if (outcomes[i].echoed != want) FAIL_CHECK("connection " << i << " echoed " << outcomes[i].echoed);
      resets += r;
      echoed += outcomes[i].echoed;
      expected += want;
    }
    CHECK(echoed == expected);
    CHECK(st.bytes.load() == expected * k_message);
    CHECK(st.resets.load() == resets);
    CHECK(st.eofs.load() == conns - resets);
    CHECK(st.other_errors.load() == 0);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

// What every executor does (sync_wait and post on its thread, priorities, resume_on
// to and from it, channels, spawn, ...) is tested over all kinds, asio_executor
// included: weft_test::executor_kinds (tests/support/executors.hpp).
TEST_CASE("asio_executor: options, and wrapping a caller's context", "[asio]") {
  asio_executor io{{.priorities = 3}};
  CHECK(io.priorities() == 3);
  CHECK_THROWS_AS(asio_executor({.priorities = 0}), std::invalid_argument);
  CHECK_THROWS_AS(asio_executor({.priorities = 17}), std::invalid_argument);

  asio::io_context ctx;
  {
    asio_executor wrapped(ctx);
    CHECK(&wrapped.context() == &ctx);
    CHECK(weft::sync_wait(wrapped, []() -> weft::task<int> { co_return 7; }()) == 7);
  }
}

TEST_CASE("asio_executor over a caller's context: destroyed with a long queue, the context runs again safely",
          "[asio]") {
  asio::io_context ctx;
  std::atomic<int> ran{0};
  weft_test::gate started, release;  // outlive the executor, which runs the task using them
  {
    asio_executor wrapped(ctx);
    weft::post(wrapped, [](weft_test::gate& s, weft_test::gate& r) -> weft::task<void> {
      s.open();
      r.wait();  // holds the I/O thread while 500 more tasks queue up
      co_return;
    }(started, release));
    started.wait();
    for (int i = 0; i < 500; ++i)
      weft::post(wrapped, [](std::atomic<int>& n) -> weft::task<void> {
        n.fetch_add(1);
        co_return;
      }(ran));
    release.open();
  }  // the destructor runs everything queued (drains of 64 tasks each re-post themselves)
  CHECK(ran == 500);
  // Drains the executor left queued in the caller's context do nothing now (they ran
  // drain() on the destroyed executor before: ASan's use after free).
  ctx.restart();
  CHECK_NOTHROW(ctx.poll());
}

TEST_CASE("use_task: plain, composed, no-error and value-only signatures", "[asio]") {
  const std::size_t fds_before = weft_io_test::fd_count();  // Asio opens its reactor's fds lazily
  {
    asio_executor io;
    weft::thread_pool pool{{.threads = 1}};

    auto body = [&]() -> weft::task<void> {
      // steady_timer: void(error_code)
      asio::steady_timer t(io.context(), 5ms);
      std::error_code ec = co_await t.async_wait(use_task);
      CHECK_FALSE(ec);
      CHECK(io.owns_current_thread());  // resumed inline on the I/O thread

      // asio::post: void() -> co_await yields void
      co_await asio::post(io.get_executor(), use_task);
      CHECK(io.owns_current_thread());

      // A value-only signature void(int), completing later and completing inline.
      auto ex = io.get_executor();
      int v = co_await asio::async_initiate<const weft::io::use_task_t&, void(int)>(
          [ex](auto handler) { asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(42); }); }, use_task);
      CHECK(v == 42);
      int w = co_await asio::async_initiate<const weft::io::use_task_t&, void(int)>(
          [](auto handler) { std::move(handler)(7); }, use_task);
      CHECK(w == 7);

      // Sockets, resolver, async_write and async_read_until.
      tcp::acceptor a(io.context(), loopback(0));
      tcp::resolver resolver(io.context());
      auto [rec, results] =
          co_await resolver.async_resolve("127.0.0.1", std::to_string(a.local_endpoint().port()),
                                          tcp::resolver::numeric_host | tcp::resolver::numeric_service, use_task);
      REQUIRE_FALSE(rec);
      REQUIRE(results.size() == 1);
      tcp::socket c(io.context());
      auto connecting = [&]() -> weft::task<std::error_code> {
        auto [e, ep] = co_await asio::async_connect(c, results, use_task);
        co_return e;
      };
      auto conn = weft::spawn(connecting()).fork();
      auto [aec, srv] = co_await a.async_accept(use_task);
      REQUIRE_FALSE(aec);
      auto r1 = co_await conn;  // outside the macro: g++-12 evaluates a co_await operand of Catch's macros twice
      CHECK_FALSE(r1);
      auto [wec, wn] = co_await asio::async_write(c, asio::buffer(std::string("line one\nline two\n")), use_task);
      CHECK_FALSE(wec);
      CHECK(wn == 18);
      std::string got;
      auto [lec, ln] = co_await asio::async_read_until(srv, asio::dynamic_buffer(got), '\n', use_task);
      CHECK_FALSE(lec);
      CHECK(got.substr(0, ln) == "line one\n");
    };
    weft::sync_wait(io, body());

    // A pool task awaiting the I/O thread's timer resumes on the pool.
    auto on_pool = [&]() -> weft::task<int> {
      int n = 0;
      for (int i = 0; i < 20; ++i) {
        asio::steady_timer t(io.context(), 100us);
        auto ec = co_await t.async_wait(use_task);
        n += !ec && pool.owns_current_thread();
      }
      co_return n;
    };
    CHECK(weft::sync_wait(pool, on_pool()) == 20);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("asio: with_timeout and with_cancel", "[asio]") {
  asio_executor io;
  weft::thread_pool pool{{.threads = 1}};
  tcp::acceptor a(io.context(), loopback(0));
  tcp::socket c(io.context()), s(io.context());
  c.connect(loopback(a.local_endpoint().port()));
  a.accept(s);
  char buf[16];

  auto timed = [&]() -> weft::task<void> {
    auto t0 = std::chrono::steady_clock::now();
    auto [ec, n] = co_await weft::io::with_timeout(s.async_read_some(asio::buffer(buf), use_task), 50ms);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(ec == std::errc::timed_out);
    CHECK(n == 0);
    CHECK(waited >= 45ms);
    CHECK(waited < 5s);
    // Completes in time: the result is the operation's own.
    auto [e1, n1] = co_await asio::async_write(c, asio::buffer("abc", 3), use_task);
    auto [e2, n2] = co_await weft::io::with_timeout(s.async_read_some(asio::buffer(buf), use_task), 5s);
    CHECK_FALSE(e1);
    CHECK_FALSE(e2);
    CHECK(n2 == 3);
    (void)n1;
  };
  weft::sync_wait(io, timed());
  // From a pool task too (the timer and the cancellation run on the I/O thread).
  auto timed_on_pool = [&]() -> weft::task<bool> {
    auto [ec, n] = co_await weft::io::with_timeout(s.async_read_some(asio::buffer(buf), use_task), 20ms);
    co_return ec == std::errc::timed_out&& n == 0 && pool.owns_current_thread();
  };
  CHECK(weft::sync_wait(pool, timed_on_pool()));

  // with_cancel: cancelled from another thread while pending.
  weft::io::cancel_source stop;
  std::atomic<bool> reading{false};
  auto cancellable = [&]() -> weft::task<std::error_code> {
    reading.store(true);
    auto [ec, n] = co_await weft::io::with_cancel(s.async_read_some(asio::buffer(buf), use_task), stop);
    co_return ec;
  };
  std::thread canceller([&] {
    while (!reading.load()) std::this_thread::yield();
    weft_io_test::round_trip(pool);  // the task suspended: the read's start is posted to the I/O thread
    weft_test::gate started;         // Asio runs its handlers in order: the read started before this one
    asio::post(io.get_executor(), [&] { started.open(); });
    started.wait();
    stop.request_cancel();
  });
  auto ec = weft::sync_wait(pool, cancellable());
  canceller.join();
  CHECK(ec == std::errc::operation_canceled);
  CHECK(ec == weft::io::error::cancelled);
  CHECK(stop.cancel_requested());
  // Already cancelled before it starts: ends at once.
  auto t0 = std::chrono::steady_clock::now();
  CHECK(weft::sync_wait(io, cancellable()) == std::errc::operation_canceled);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  // Not cancelled: completes normally.
  weft::io::cancel_source idle;
  auto normal = [&]() -> weft::task<std::size_t> {
    auto [e1, n1] = co_await asio::async_write(c, asio::buffer("xy", 2), use_task);
    auto [e2, n2] = co_await weft::io::with_cancel(s.async_read_some(asio::buffer(buf), use_task), idle);
    co_return e1 || e2 ? 0 : n2;
  };
  CHECK(weft::sync_wait(io, normal()) == 2);
  // Asio's own per-operation slot works with use_task too (emitted on the I/O thread).
  asio::cancellation_signal signal;
  auto emit_later = [&]() -> weft::task<void> {
    asio::steady_timer t(io.context(), 10ms);
    co_await t.async_wait(use_task);
    signal.emit(asio::cancellation_type::terminal);
  };
  auto slotted = [&]() -> weft::task<std::error_code> {
    auto h = weft::spawn(emit_later()).fork();
    auto [e, n] = co_await s.async_read_some(asio::buffer(buf), asio::bind_cancellation_slot(signal.slot(), use_task));
    co_await h;
    co_return e;
  };
  CHECK(weft::sync_wait(io, slotted()) == weft::io::error::cancelled);
  weft::sync_wait(io, [&]() -> weft::task<void> {
    c.close();
    s.close();
    a.close();
    co_return;
  }());
}

namespace {

// Waits for a timer an hour away: only a stop ends it.
weft::task<std::error_code> wait_an_hour(asio::io_context& ctx, std::atomic<int>& started) {
  asio::steady_timer t(ctx, 1h);
  started.fetch_add(1);
  co_return co_await t.async_wait(use_task);
}

// The same under weft::io::with_timeout (an hour as well): the stop still ends it.
weft::task<std::error_code> wait_an_hour_timed(asio::io_context& ctx, std::atomic<int>& started) {
  asio::steady_timer t(ctx, 1h);
  started.fetch_add(1);
  co_return co_await weft::io::with_timeout(t.async_wait(use_task), 1h);
}

// Reads from a socket nobody writes to.
weft::task<std::error_code> read_nothing(tcp::socket& s, std::atomic<int>& started) {
  char buf[16];
  started.fetch_add(1);
  auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_task);
  co_return n == 0 ? ec : std::error_code{};
}

}  // namespace

TEST_CASE("asio: use_task operations watch the awaiting task's stop token", "[asio][stop]") {
  asio_executor io;
  weft::thread_pool pool{{.threads = 2}};
  tcp::acceptor a(io.context(), loopback(0));
  tcp::socket c(io.context()), s(io.context());
  c.connect(loopback(a.local_endpoint().port()));
  a.accept(s);

  SECTION(
      "a scope's stop ends waiting timers (also under with_timeout) and a read, from the I/O thread and from a pool") {
    std::atomic<int> started{0};
    constexpr int k_timers = 200;
    auto [cancelled, ms] = weft::sync_wait(pool, [&]() -> weft::task<std::pair<int, long>> {
      weft::scope<std::error_code> sc;
      for (int i = 0; i < k_timers; ++i) {
        if (i % 4 == 0)
          sc.spawn(wait_an_hour(io.context(), started));
        else if (i % 4 == 1)
          sc.spawn(weft::spawn(wait_an_hour(io.context(), started)).run_on(io));
        else if (i % 4 == 2)
          sc.spawn(wait_an_hour_timed(io.context(), started));
        else
          sc.spawn(weft::spawn(wait_an_hour_timed(io.context(), started)).run_on(io));
      }
      sc.spawn(read_nothing(s, started));
      while (started.load() < k_timers + 1) {  // (this task runs under no token)
        asio::steady_timer tick(io.context(), 1ms);
        co_await tick.async_wait(use_task);
      }
      const auto t0 = std::chrono::steady_clock::now();
      sc.request_stop();
      int n = 0;
      for (;;) {
        const auto ec = co_await sc.next();
        if (!ec) break;
        if (*ec == std::errc::operation_canceled && *ec == weft::io::error::cancelled) ++n;
      }
      co_await sc.join();
      co_return std::pair{
          n, static_cast<long>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count())};
    }());
    CHECK(cancelled == k_timers + 1);
    CHECK(ms < 2000);
    WARN(k_timers + 1 << " Asio operations stopped in " << ms << " ms");
  }
  SECTION("a token stopped before the operation starts ends it at once") {
    std::atomic<int> started{0};
    const auto t0 = std::chrono::steady_clock::now();
    auto ec = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
      weft::scope<std::error_code> sc;
      sc.request_stop();
      sc.spawn(wait_an_hour(io.context(), started));
      auto r = co_await sc.next();
      co_await sc.join();
      co_return r.value_or(std::error_code{});
    }());
    CHECK(ec == std::errc::operation_canceled);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  SECTION("a task without a token, and one whose token is never stopped, complete normally") {
    auto write_then_read = [&]() -> weft::task<std::size_t> {
      char buf[16];
      auto [e1, n1] = co_await asio::async_write(c, asio::buffer("abc", 3), use_task);
      auto [e2, n2] = co_await s.async_read_some(asio::buffer(buf), use_task);
      co_return e1 || e2 ? 0 : n2 + (n1 == 3 ? 0 : 100);
    };
    CHECK(weft::sync_wait(pool, write_then_read()) == 3);
    auto in_scope = [&]() -> weft::task<std::size_t> {
      weft::scope<std::size_t> sc;
      sc.spawn(write_then_read());
      auto n = co_await sc.next();
      co_await sc.join();
      co_return n.value_or(0);
    };
    CHECK(weft::sync_wait(pool, in_scope()) == 3);
  }
  SECTION("under a stopped token what can complete without waiting completes; with_cancel(op, {}) writes last") {
    // The rule of weft/stop.hpp, as over io_uring (uring_stop_test): data already there
    // is read, a write with room is done, a wait is cut short; a last write that must
    // wait for the peer runs under an empty token and is not cut short.
    const int small = 4096;
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    ::setsockopt(c.native_handle(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    REQUIRE(::write(c.native_handle(), "ping", 4) == 4);
    const std::string big(256 << 10, 'x');  // far more than both buffers: writing it must wait
    std::stop_source stop;
    stop.request_stop();
    std::size_t cut_n = 0;
    std::atomic<std::size_t> received{0};
    std::thread reader;
    // A named closure: the child outlives the statement that spawns it.
    auto child = [&]() -> weft::task<bool> {
      char buf[8] = {};
      const auto [rec, rn] = co_await s.async_read_some(asio::buffer(buf), use_task);              // "ping" is there
      const auto [wec, wn] = co_await asio::async_write(s, asio::buffer("503 bye", 7), use_task);  // room
      const auto [iec, in] = co_await s.async_read_some(asio::buffer(buf), use_task);              // would wait
      char got[8] = {};
      const bool bye = ::recv(c.native_handle(), got, sizeof got, 0) == 7 && std::string(got, 7) == "503 bye";
      const auto [cec, cn] = co_await asio::async_write(s, asio::buffer(big), use_task);  // must wait: cut short
      cut_n = cn;
      reader = std::thread([&] {  // drains the client end until the server shuts its side down
        char chunk[65536];
        for (;;) {
          const auto n = ::read(c.native_handle(), chunk, sizeof chunk);
          if (n <= 0) break;
          received.fetch_add(static_cast<std::size_t>(n), std::memory_order_relaxed);
        }
      });
      const auto [lec, ln] =
          co_await weft::io::with_cancel(asio::async_write(s, asio::buffer(big), use_task), std::stop_token{});
      co_return !rec && rn == 4 && !wec && wn == 7 && iec == weft::io::error::cancelled && bye &&
          cec == weft::io::error::cancelled && cn < big.size() && !lec && ln == big.size();
    };
    auto ok = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope<bool> sc{stop.get_token()};
      sc.spawn(child());
      auto v = co_await sc.next();
      co_await sc.join();
      co_return v.value_or(false);
    }());
    CHECK(ok);
    s.shutdown(tcp::socket::shutdown_send);
    if (reader.joinable()) reader.join();
    CHECK(received.load() == cut_n + big.size());  // nothing of the last write was lost
  }
  SECTION("a stop racing the timer's expiry: completed or cancelled, never both, never neither") {
    const int rounds = weft_test::rounds(2'000, 300);
    int completed = 0, cancelled = 0, other = 0;
    for (int r = 0; r < rounds; ++r) {
      std::stop_source src;
      std::thread stopper;
      auto ec = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
        weft::scope<std::error_code> sc{src.get_token()};
        sc.spawn([](asio::io_context& ctx, int us) -> weft::task<std::error_code> {
          asio::steady_timer t(ctx, std::chrono::microseconds(us));
          co_return co_await t.async_wait(use_task);
        }(io.context(), 100 + r % 200));
        stopper = std::thread([&src, r] {
          std::this_thread::sleep_for(std::chrono::microseconds((r * 7) % 300));
          src.request_stop();
        });
        auto v = co_await sc.next();
        co_await sc.join();
        co_return v.value_or(std::make_error_code(std::errc::invalid_argument));
      }());
      stopper.join();
      if (!ec)
        ++completed;
      else if (ec == std::errc::operation_canceled)
        ++cancelled;
      else
        ++other;
    }
    CHECK(other == 0);
    CHECK(completed + cancelled == rounds);
    WARN(completed << " completed, " << cancelled << " cancelled of " << rounds);
  }
  weft::sync_wait(io, [&]() -> weft::task<void> {
    c.close();
    s.close();
    a.close();
    co_return;
  }());
}

TEST_CASE("asio: refused connections and invalid addresses", "[asio]") {
  asio_executor io;
  unsigned short closed_port = 0;
  {
    tcp::acceptor a(io.context(), loopback(0));
    closed_port = a.local_endpoint().port();
  }
  auto body = [&]() -> weft::task<void> {
    tcp::socket s(io.context());
    auto ec = co_await s.async_connect(loopback(closed_port), use_task);
    CHECK(ec == std::errc::connection_refused);
    CHECK(ec.category() == std::system_category());
    std::error_code bad;
    (void)asio::ip::make_address("999.1.2.3", bad);
    CHECK(bad);
    tcp::resolver r(io.context());
    auto [rec, results] = co_await r.async_resolve("not an address", "80", tcp::resolver::numeric_host, use_task);
    CHECK(rec);
    CHECK(results.empty());
  };
  weft::sync_wait(io, body());
}

// ---- Asio's counterparts of the native types: the same error codes ------------------------

namespace {

using asio::ip::udp;
using weft::io::resolve_error;

// Before main, so in every thread: the native signal_set reads SIGUSR1 through a signalfd
// (weft/io/signal.hpp). Asio's signal_set takes SIGUSR2 through a handler: left unblocked.
const bool g_sigusr1_blocked = [] {
  weft::io::block_signals({SIGUSR1});
  return true;
}();

// An error code as a use_task completion delivers it (the translation at the boundary).
weft::task<std::error_code> through_use_task(std::error_code ec) {
  co_return co_await asio::async_initiate<const weft::io::use_task_t&, void(std::error_code)>(
      [ec](auto handler) { std::move(handler)(ec); }, use_task);
}

// The same lookup through Asio's resolver and through weft::io::resolve.
struct two_lookups {
  std::error_code asio_ec;
  std::error_code native_ec;
};
two_lookups resolve_both(asio_executor& io, weft::executor& pool, const std::string& host, const std::string& service) {
  tcp::resolver resolver(io.context());
  two_lookups r;
  r.asio_ec = weft::sync_wait(io, [&]() -> weft::task<std::error_code> {
    auto [ec, results] = co_await resolver.async_resolve(host, service, use_task);
    co_return ec;
  }());
  r.native_ec = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
    auto [ec, endpoints] = co_await weft::io::resolve(host, service);
    co_return ec;
  }());
  return r;
}

// A receive that reports a datagram larger than the buffer as std::errc::message_size,
// as weft::io::udp_socket does (io/README.md): MSG_TRUNC makes the kernel return the
// datagram's length, which Asio passes on as the byte count.
template <class Socket, class Endpoint>
weft::task<std::pair<std::error_code, std::size_t>> receive_whole(Socket& s, char* buf, std::size_t len,
                                                                  Endpoint& from) {
  auto [ec, n] = co_await s.async_receive_from(asio::buffer(buf, len), from, MSG_TRUNC, use_task);
  if (!ec && n > len) ec = std::make_error_code(std::errc::message_size);  // the bytes past `len` are lost
  co_return std::pair{ec, std::min(n, len)};
}

}  // namespace

TEST_CASE("asio and io_uring: a resolver's failures are the same error codes", "[asio][resolve]") {
  asio_executor io;
  weft::thread_pool pool{{.threads = 1}};
  // .invalid never resolves (RFC 6761); without a name server, both may read try_again.
  const auto unknown = resolve_both(io, pool, "no-such-host.invalid", "80");
  INFO("asio: " << unknown.asio_ec.category().name() << " " << unknown.asio_ec.value() << " "
                << unknown.asio_ec.message() << "; native: " << unknown.native_ec.category().name() << " "
                << unknown.native_ec.value());
  CHECK((unknown.native_ec == resolve_error::host_not_found || unknown.native_ec == resolve_error::try_again));
  CHECK(unknown.asio_ec == unknown.native_ec);
  CHECK(unknown.asio_ec.default_error_condition() == unknown.native_ec.default_error_condition());
  CHECK(unknown.asio_ec.category() == weft::io::resolve_category());
  CHECK(unknown.asio_ec.message() == unknown.native_ec.message());
  CHECK_FALSE(unknown.asio_ec == asio::error::host_not_found);  // translated at the boundary

  const auto service = resolve_both(io, pool, "127.0.0.1", "no-such-service");
  CHECK(service.native_ec == resolve_error::service_not_found);
  CHECK(service.asio_ec == service.native_ec);
  CHECK(service.asio_ec.default_error_condition() == service.native_ec.default_error_condition());

  // Every resolver code Asio has, as weft::io::resolve reports the same getaddrinfo failure.
  const auto map = [&](std::error_code asio_ec) { return weft::sync_wait(io, through_use_task(asio_ec)); };
  CHECK(map(asio::error::host_not_found) == resolve_error::host_not_found);        // EAI_NONAME
  CHECK(map(asio::error::no_data) == resolve_error::host_not_found);               // EAI_NODATA
  CHECK(map(asio::error::host_not_found_try_again) == resolve_error::try_again);   // EAI_AGAIN
  CHECK(map(asio::error::no_recovery) == resolve_error::failure);                  // EAI_FAIL
  CHECK(map(asio::error::service_not_found) == resolve_error::service_not_found);  // EAI_SERVICE
  CHECK(map(asio::error::socket_type_not_supported) == std::error_code(EAI_SOCKTYPE, weft::io::resolve_category()));
  // EAI_FAMILY: an errno over Asio, a resolve_error natively; equal as a condition.
  const std::error_code family = map(asio::error::address_family_not_supported);
  CHECK(family == std::errc::address_family_not_supported);
  CHECK(make_error_code(resolve_error::family_not_supported) == std::errc::address_family_not_supported);
  // EAI_MEMORY: ENOMEM in the system category on both.
  CHECK(map(asio::error::no_memory) == std::error_code(ENOMEM, std::system_category()));
}

TEST_CASE("asio and io_uring: signal waits deliver and end alike", "[asio][signal]") {
  REQUIRE(g_sigusr1_blocked);
  asio_executor io;
  weft::thread_pool pool{{.threads = 1}};
  asio::signal_set asio_sigs(io.context(), SIGUSR2);
  auto asio_wait = [&]() -> weft::task<std::pair<std::error_code, int>> {
    auto [ec, signo] = co_await asio_sigs.async_wait(use_task);
    co_return std::pair{ec, signo};
  };
  REQUIRE(::kill(::getpid(), SIGUSR2) == 0);  // kept by the set until a wait takes it
  const auto asio_got = weft::sync_wait(pool, asio_wait());
  CHECK_FALSE(asio_got.first);
  CHECK(asio_got.second == SIGUSR2);
  // cancel() while a wait is pending; a stop of the task's token.
  const auto asio_cancelled = weft::sync_wait(io, [&]() -> weft::task<std::error_code> {
    asio::steady_timer later(io.context(), 20ms);
    later.async_wait([&](std::error_code) { asio_sigs.cancel(); });
    co_return (co_await asio_wait()).first;
  }());
  const auto asio_stopped = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
    weft::scope<std::pair<std::error_code, int>> sc;
    sc.request_stop();
    sc.spawn(asio_wait());
    auto r = co_await sc.next();
    co_await sc.join();
    co_return r ? r->first : std::error_code{};
  }());
  CHECK(asio_cancelled == weft::io::error::cancelled);
  CHECK(asio_cancelled == std::errc::operation_canceled);
  CHECK(asio_stopped == weft::io::error::cancelled);

  auto ring = weft_io_test::make_uring_or_skip();
  if (!ring) return;
  weft::io::signal_set native_sigs(*ring, {SIGUSR1});
  auto native_wait = [&]() -> weft::task<weft::io::signal_result> { co_return co_await native_sigs.wait(); };
  REQUIRE(::kill(::getpid(), SIGUSR1) == 0);
  const auto native_got = weft::sync_wait(pool, native_wait());
  CHECK_FALSE(native_got.ec);
  CHECK(native_got.signo == SIGUSR1);
  const auto native_stopped = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
    weft::scope<weft::io::signal_result> sc;
    sc.request_stop();
    sc.spawn(native_wait());
    auto r = co_await sc.next();
    co_await sc.join();
    co_return r ? r->ec : std::error_code{};
  }());
  native_sigs.close();
  const auto native_closed = weft::sync_wait(pool, native_wait()).ec;
  CHECK(native_stopped == asio_stopped);
  CHECK(native_closed == asio_cancelled);
  CHECK(native_closed == std::errc::operation_canceled);
}

TEST_CASE("asio and io_uring: UDP truncation and refusal read the same", "[asio][udp]") {
  asio_executor io;
  const std::string big(1000, 'd');
  char small[10];
  // Asio: without MSG_TRUNC the datagram is cut silently; with it, n is its length.
  udp::socket a(io.context(), udp::endpoint(asio::ip::address_v4::loopback(), 0));
  udp::socket b(io.context(), udp::endpoint(asio::ip::address_v4::loopback(), 0));
  const auto results = weft::sync_wait(io, [&]() -> weft::task<std::vector<std::error_code>> {
    std::vector<std::error_code> out;
    udp::endpoint from;
    for (int i = 0; i < 2; ++i) {
      auto [sec, sn] = co_await a.async_send_to(asio::buffer(big), b.local_endpoint(), use_task);
      out.push_back(sec);
    }
    auto [plain_ec, plain_n] = co_await b.async_receive_from(asio::buffer(small), from, use_task);
    out.push_back(plain_ec);
    out.push_back(plain_n == sizeof small ? std::error_code{} : std::make_error_code(std::errc::bad_message));
    auto [ec, n] = co_await receive_whole(b, small, sizeof small, from);
    out.push_back(ec);
    out.push_back(n == sizeof small && from == a.local_endpoint() ? std::error_code{}
                                                                  : std::make_error_code(std::errc::bad_message));
    co_return out;
  }());
  REQUIRE(results.size() == 6);
  CHECK_FALSE(results[0]);
  CHECK_FALSE(results[1]);
  CHECK_FALSE(results[2]);  // the silent cut: no error, 10 bytes
  CHECK_FALSE(results[3]);
  const std::error_code asio_truncated = results[4];
  CHECK(asio_truncated == std::errc::message_size);
  CHECK_FALSE(results[5]);
  // A connected socket whose peer is gone: ICMP port unreachable, connection_refused.
  const std::error_code asio_refused = weft::sync_wait(io, [&]() -> weft::task<std::error_code> {
    udp::socket c(io.context(), udp::endpoint(asio::ip::address_v4::loopback(), 0));
    const udp::endpoint gone = b.local_endpoint();
    b.close();
    c.connect(gone);
    auto [sec, sn] = co_await c.async_send(asio::buffer("x", 1), use_task);
    asio::steady_timer limit(io.context(), 2s);
    limit.async_wait([&](std::error_code e) {
      if (!e) c.cancel();
    });
    auto [ec, n] = co_await c.async_receive(asio::buffer(small), use_task);
    limit.cancel();
    co_return sec ? sec : ec;
  }());
  CHECK(asio_refused == std::errc::connection_refused);
  CHECK(asio_refused.category() == std::system_category());

  auto ring = weft_io_test::make_uring_or_skip();
  if (!ring) return;
  weft::io::udp_socket server(*ring), client(*ring);
  REQUIRE_FALSE(server.bind(weft::io::endpoint::loopback(0)));
  REQUIRE_FALSE(client.bind(weft::io::endpoint::loopback(0)));
  const auto native = weft::sync_wait(*ring, [&]() -> weft::task<weft::io::datagram_result> {
    (void)co_await client.send_to(big.data(), big.size(), server.local_endpoint());
    co_return co_await server.receive_from(small, sizeof small);
  }());
  CHECK(native.ec == asio_truncated);
  CHECK(native.n == sizeof small);
  CHECK(native.size == big.size());
  const weft::io::endpoint gone = server.local_endpoint();
  server.close();
  REQUIRE_FALSE(client.connect(gone));
  const auto native_refused = weft::sync_wait(*ring, [&]() -> weft::task<std::error_code> {
    (void)co_await client.send("x", 1);
    co_return (co_await weft::io::with_timeout(client.receive(small, sizeof small), 2s)).ec;
  }());
  CHECK(native_refused == asio_refused);
}

TEST_CASE("asio and io_uring: Unix stream and datagram sockets report alike", "[asio][local]") {
  asio_executor io;
  const auto ok = weft::sync_wait(io, [&]() -> weft::task<std::vector<std::error_code>> {
    std::vector<std::error_code> out;
    // A stream pair: the bytes, then error::eof once the peer closed.
    asio::local::stream_protocol::socket a(io.context()), b(io.context());
    asio::local::connect_pair(a, b);
    auto [wec, wn] = co_await asio::async_write(a, asio::buffer("hi", 2), use_task);
    a.close();
    char buf[16];
    auto [rec, rn] = co_await asio::async_read(b, asio::buffer(buf, 2), use_task);
    auto [eec, en] = co_await b.async_read_some(asio::buffer(buf), use_task);
    out.push_back(wec);
    out.push_back(rec);
    out.push_back(rn == 2 && std::string(buf, 2) == "hi" ? std::error_code{}
                                                         : std::make_error_code(std::errc::bad_message));
    out.push_back(eec);
    // No socket at the path.
    asio::local::stream_protocol::socket c(io.context());
    const std::string path = "/tmp/weft-asio-test-no-socket-" + std::to_string(::getpid());
    out.push_back(co_await c.async_connect(asio::local::stream_protocol::endpoint(path), use_task));
    // A datagram pair: truncation through MSG_TRUNC, as over UDP.
    asio::local::datagram_protocol::socket d(io.context()), e(io.context());
    asio::local::connect_pair(d, e);
    const std::string big(100, 'u');
    auto [sec, sn] = co_await d.async_send(asio::buffer(big), use_task);
    asio::local::datagram_protocol::endpoint from;
    auto [tec, tn] = co_await receive_whole(e, buf, 10, from);
    out.push_back(sec);
    out.push_back(tec);
    co_return out;
  }());
  REQUIRE(ok.size() == 7);
  CHECK_FALSE(ok[0]);
  CHECK_FALSE(ok[1]);
  CHECK_FALSE(ok[2]);
  CHECK(ok[3] == weft::io::error::eof);
  CHECK(ok[4] == std::errc::no_such_file_or_directory);
  CHECK(ok[4].category() == std::system_category());
  CHECK_FALSE(ok[5]);
  CHECK(ok[6] == std::errc::message_size);

  // The same with weft::io::unix_stream and unix_datagram.
  auto ring = weft_io_test::make_uring_or_skip();
  if (!ring) return;
  const auto native = weft::sync_wait(*ring, [&]() -> weft::task<std::vector<std::error_code>> {
    std::vector<std::error_code> out;
    weft::io::unix_stream a(*ring), b(*ring);
    out.push_back(weft::io::unix_stream::pair(a, b));
    auto [wec, wn] = co_await a.write_all("hi", 2);
    a.close();
    char buf[16];
    auto [rec, rn] = co_await b.read_some(buf, sizeof buf);
    auto [eec, en] = co_await b.read_some(buf, sizeof buf);
    out.push_back(wec);
    out.push_back(rn == 2 && std::string(buf, 2) == "hi" ? rec : std::make_error_code(std::errc::bad_message));
    out.push_back(eec);
    weft::io::unix_stream c(*ring);
    const std::string path = "/tmp/weft-asio-test-no-socket-" + std::to_string(::getpid());
    out.push_back(co_await c.connect(weft::io::unix_endpoint::path(path)));
    weft::io::unix_datagram d(*ring), e(*ring);
    out.push_back(weft::io::unix_datagram::pair(d, e));
    const std::string big(100, 'u');
    auto sent = co_await d.send(big.data(), big.size());
    auto got = co_await e.receive(buf, 10);
    out.push_back(sent.ec);
    out.push_back(got.n == 10 && got.size == 100 ? got.ec : std::make_error_code(std::errc::bad_message));
    co_return out;
  }());
  REQUIRE(native.size() == 8);
  CHECK_FALSE(native[0]);
  CHECK_FALSE(native[1]);
  CHECK_FALSE(native[2]);
  CHECK(native[3] == ok[3]);  // error::eof on both
  CHECK(native[4] == ok[4]);  // ENOENT, std::system_category on both
  CHECK_FALSE(native[5]);
  CHECK_FALSE(native[6]);
  CHECK(native[7] == ok[6]);  // std::errc::message_size on both
}
