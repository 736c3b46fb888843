// tcp_stream::cancel() against fd reuse: a cancel that names a socket must never reach
// another socket that was given the same fd number after the first one was closed.
// Skipped (with a WARN naming the cause) where io_uring is unavailable.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <stop_token>
#include <string>
#include <thread>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::endpoint;
using weft::io::tcp_listener;
using weft::io::tcp_stream;
using weft_io_test::connect_plain;
using weft_io_test::failures;

TEST_CASE("uring: a cancel queued for a closed socket does not cancel the socket that reused its fd", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const endpoint ep = l.local_endpoint();

  auto body = [&]() -> weft::task<void> {  // on the loop thread: it cannot take a turn meanwhile
    const int ca = connect_plain(ep);
    REQUIRE(ca >= 0);
    auto [e1, a] = co_await l.accept();
    REQUIRE_FALSE(e1);
    const int old_fd = a.native_handle();
    std::thread([&a] { a.cancel(); }).join();  // queued: runs at the loop's next turn
    a.close();
    // The lowest free fd number is a's: a new socket gets it.
    tcp_stream b(*io, connect_plain(ep));
    REQUIRE(b.is_open());
    if (b.native_handle() != old_fd) {
      WARN("SKIPPED: the new socket did not reuse the closed one's fd");
      ::close(ca);
      co_return;
    }
    // b's read is in flight when a's cancel reaches the loop; nobody cancelled b, and
    // its peer never writes, so only the timeout may end it.
    char buf[8];
    auto [e2, n] = co_await weft::io::with_timeout(b.read_some(buf, sizeof buf), 50ms);
    CHECK(e2 == std::errc::timed_out);
    CHECK(n == 0);
    ::close(ca);
  };
  weft::sync_wait(*io, body());

  // A socket that reused a closed socket's fd is still cancelled by its own cancel().
  auto again = [&]() -> weft::task<void> {
    const int ca = connect_plain(ep);
    REQUIRE(ca >= 0);
    auto [e1, a] = co_await l.accept();
    REQUIRE_FALSE(e1);
    a.close();
    tcp_stream b(*io, connect_plain(ep));
    REQUIRE(b.is_open());
    std::atomic<bool> reading{false};
    std::thread canceller([&] {
      while (!reading.load()) std::this_thread::yield();
      weft_io_test::round_trip(*io);  // the read is submitted before the cancel is taken
      b.cancel();
    });
    char buf[8];
    reading.store(true);
    auto [e2, n] = co_await weft::io::with_timeout(b.read_some(buf, sizeof buf), 10s);
    canceller.join();
    CHECK(e2 == std::errc::operation_canceled);
    CHECK(n == 0);
    ::close(ca);
  };
  weft::sync_wait(*io, again());
}

TEST_CASE(
    "uring: a watchdog cancelling one stream while its owner closes and reconnects never cancels another "
    "socket's operation",
    "[io][uring][stress]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const endpoint ep = l.local_endpoint();
  const std::size_t fds_before = weft_io_test::fd_count();

  constexpr int k_rounds = 100'000;
  tcp_stream target(*io);  // what the watchdog cancels, whatever socket it holds at the time
  std::atomic<bool> done{false};
  std::atomic<long> cancels{0};
  std::thread watchdog([&] {
    while (!done.load(std::memory_order_relaxed)) {
      target.cancel();
      cancels.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::yield();
    }
  });

  failures fail;
  int reused = 0;
  auto body = [&]() -> weft::task<void> {
    tcp_stream target_peer(*io);
    for (int round = 0; round < k_rounds; ++round) {
      const int freed = target.native_handle();
      target.close();  // the watchdog may be reading target's socket right now
      target_peer.close();
      // A fresh socket, very likely on the number just freed: an operation of it must
      // only ever end by its own timeout (its peer never writes).
      tcp_stream victim(*io, connect_plain(ep));
      if (!victim.is_open()) {
        fail.add("connect failed in round " + std::to_string(round));
        break;
      }
      reused += victim.native_handle() == freed;
      // Prepared in the same loop turn as the close above: a cancel the watchdog queued
      // for target's old socket runs at the next turn, with this read in flight.
      char buf[8];
      auto [ec, n] = co_await weft::io::with_timeout(victim.read_some(buf, sizeof buf), 20us);
      if (ec != std::errc::timed_out)
        fail.add("round " + std::to_string(round) + ": the victim's read ended with '" + ec.message() + "'");
      auto [aec, peer] = co_await l.accept();  // the victim's server side (queued by the listener meanwhile)
      if (aec) {
        fail.add("accept: " + aec.message());
        break;
      }
      target = std::move(victim);  // now the watchdog's target
      target_peer = std::move(peer);
    }
    target.close();
    target_peer.close();
  };
  weft::sync_wait(*io, body());
  done.store(true);
  watchdog.join();

  INFO(fail.m_count << " foreign operations ended otherwise; first: " << fail.m_first);
  CHECK(fail.m_count == 0);
  CHECK(reused > k_rounds / 2);  // the fd numbers were reused: the race was really run
  CHECK(cancels.load() > 0);
  CHECK(weft_io_test::fd_count() == fds_before);
}

// with_cancel over a ring operation takes a std::stop_token (weft/stop.hpp's model): a
// stop requested before the start, while pending, and racing the operation's own end.
weft::task<std::error_code> stoppable_sleep(weft::io::uring_context& io, std::chrono::nanoseconds d,
                                            std::stop_token t) {
  co_return co_await weft::io::with_cancel(weft::io::sleep_for(io, d), std::move(t));
}

TEST_CASE("uring: with_cancel over a std::stop_token", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  weft::thread_pool pool{{.threads = 2}};

  SECTION("stopped before the operation starts") {
    std::stop_source stop;
    stop.request_stop();
    auto ec = weft::sync_wait(*io, stoppable_sleep(*io, 30s, stop.get_token()));
    CHECK(ec == std::errc::operation_canceled);
  }
  SECTION("stopped from another thread while pending, awaited from a pool") {
    std::stop_source stop;
    std::atomic<bool> started{false};
    std::thread stopper([&] {
      while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
      std::this_thread::sleep_for(5ms);  // not synchronisation: either order is correct
      stop.request_stop();
    });
    auto ec = weft::sync_wait(pool, [&]() -> weft::task<std::error_code> {
      started.store(true, std::memory_order_release);
      co_return co_await stoppable_sleep(*io, 30s, stop.get_token());
    }());
    stopper.join();
    CHECK(ec == std::errc::operation_canceled);
  }
  SECTION("a token that can never stop: the operation runs to its end") {
    auto ec = weft::sync_wait(*io, stoppable_sleep(*io, 1ms, std::stop_token{}));
    CHECK_FALSE(ec);
  }
  SECTION("a stop racing the operation's end, 100,000 times: it completes or is cancelled, never neither") {
    const int rounds = WEFT_SANITIZED ? 1'000 : 100'000;
    int completed = 0;
    int cancelled = 0;
    int other = 0;
    for (int i = 0; i < rounds; ++i) {
      std::stop_source stop;
      std::thread stopper([&] { stop.request_stop(); });
      auto ec = weft::sync_wait(pool, stoppable_sleep(*io, std::chrono::microseconds(i % 20), stop.get_token()));
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
}
