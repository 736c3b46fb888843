// weft/io/signal.hpp: signal_set on a uring_context, on an io_pool and awaited from a
// thread_pool; signals that came while nobody waited; close(), a stop and a deadline
// ending a wait; and the errors: a signal that is not blocked, one that cannot be
// caught, no signal at all.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::signal_result;
using weft::io::signal_set;

namespace {

// Before main, so before any thread exists: every thread of this process blocks them.
const bool g_blocked = [] {
  weft::io::block_signals({SIGUSR1, SIGHUP});
  return true;
}();

// Sends `s` to the process (not to a thread: the ring's reader may be any worker).
void send(int s) { REQUIRE(::kill(::getpid(), s) == 0); }

weft::task<signal_result> wait_once(signal_set& sigs) { co_return co_await sigs.wait(); }

}  // namespace

TEST_CASE("signal_set: a signal reaches the waiting task on every kind of context", "[io][signal]") {
  REQUIRE(g_blocked);
  SECTION("uring_context") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    signal_set sigs(*io, {SIGUSR1});
    send(SIGUSR1);  // before the wait: kept by the kernel
    const auto r = weft::sync_wait(*io, wait_once(sigs));
    CHECK_FALSE(r.ec);
    CHECK(r.signo == SIGUSR1);
  }
  SECTION("io_pool, and a thread_pool task awaiting a uring_context's set") {
    auto pool = weft_io_test::make_io_pool_or_skip(2);
    auto io = weft_io_test::make_uring_or_skip();
    if (!pool || !io) return;
    signal_set on_pool(*pool, {SIGUSR1, SIGHUP});
    std::thread sender([] {
      std::this_thread::sleep_for(20ms);  // while the task waits
      ::kill(::getpid(), SIGHUP);
    });
    const auto r = weft::sync_wait(*pool, wait_once(on_pool));
    sender.join();
    CHECK_FALSE(r.ec);
    CHECK(r.signo == SIGHUP);
    on_pool.close();
    weft::thread_pool tp{{.threads = 1}};
    signal_set on_ctx(*io, {SIGUSR1});
    send(SIGUSR1);
    const auto r2 = weft::sync_wait(tp, wait_once(on_ctx));
    CHECK_FALSE(r2.ec);
    CHECK(r2.signo == SIGUSR1);
  }
}

TEST_CASE("signal_set: signals that came while nobody waited are each returned once", "[io][signal]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  signal_set sigs(*io, {SIGUSR1, SIGHUP});
  send(SIGHUP);
  send(SIGUSR1);
  send(SIGUSR1);  // a standard signal does not queue: one SIGUSR1
  std::multiset<int> got;
  for (int i = 0; i < 2; ++i) {
    const auto r = weft::sync_wait(*io, wait_once(sigs));
    REQUIRE_FALSE(r.ec);
    got.insert(r.signo);
  }
  CHECK(got == std::multiset<int>{SIGUSR1, SIGHUP});
  // Nothing is left: a third wait would wait (ended by its deadline here).
  const auto late = weft::sync_wait(*io, weft::with_timeout(sigs.wait(), 20ms));
  CHECK(late.ec == std::errc::timed_out);
  const auto linked = weft::sync_wait(*io, [&]() -> weft::task<signal_result> {
    co_return co_await weft::io::with_timeout(sigs.wait(), 20ms);  // the ring's linked timeout
  }());
  CHECK(linked.ec == weft::io::error::timed_out);
  CHECK(sigs.is_open());
}

TEST_CASE("signal_set: close(), a stop and a deadline end a wait; after close() every wait is cancelled",
          "[io][signal]") {
  auto pool = weft_io_test::make_io_pool_or_skip(1);
  if (!pool) return;
  SECTION("close() from another thread while a task waits") {
    signal_set sigs(*pool, {SIGUSR1});
    std::thread closer([&] {
      std::this_thread::sleep_for(20ms);
      sigs.close();
    });
    const auto r = weft::sync_wait(*pool, wait_once(sigs));
    closer.join();
    CHECK(r.ec == weft::io::error::cancelled);
    CHECK(r.signo == 0);
    CHECK_FALSE(sigs.is_open());
    const auto again = weft::sync_wait(*pool, wait_once(sigs));
    CHECK(again.ec == weft::io::error::cancelled);  // closed: at once, without the ring
  }
  SECTION("a scope's stop") {
    signal_set sigs(*pool, {SIGUSR1});
    const auto r = weft::sync_wait(*pool, [&]() -> weft::task<signal_result> {
      weft::scope<signal_result> sc;
      sc.spawn(wait_once(sigs));
      co_await weft::io::sleep_for(*pool, 10ms);
      sc.request_stop();
      auto v = co_await sc.next();
      co_await sc.join();
      co_return v.value_or(signal_result{});
    }());
    CHECK(r.ec == std::errc::operation_canceled);
    CHECK(sigs.is_open());  // only the wait ended
  }
  SECTION("a wait made before close() and awaited after") {
    signal_set sigs(*pool, {SIGUSR1});
    auto w = sigs.wait();
    sigs.close();
    const auto r = weft::sync_wait(*pool, [&]() -> weft::task<signal_result> { co_return co_await std::move(w); }());
    CHECK(r.ec == weft::io::error::cancelled);
  }
  SECTION("a moved-from set") {
    signal_set a(*pool, {SIGUSR1});
    signal_set b(std::move(a));
    CHECK_FALSE(a.is_open());
    CHECK(b.is_open());
    CHECK(weft::sync_wait(*pool, wait_once(a)).ec == std::errc::bad_file_descriptor);
  }
}

TEST_CASE("signal_set: bad signals are clear errors", "[io][signal]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  try {
    signal_set s(*io, {SIGWINCH});  // not blocked in this process
    FAIL("a signal that is not blocked was accepted");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("SIGWINCH is not blocked") != std::string::npos);
    CHECK(std::string(e.what()).find("block_signals") != std::string::npos);
  }
  CHECK_THROWS_AS(signal_set(*io, {SIGKILL}), std::invalid_argument);
  CHECK_THROWS_AS(signal_set(*io, {}), std::invalid_argument);
  CHECK_THROWS_AS(signal_set(*io, {100000}), std::invalid_argument);
  CHECK_THROWS_AS(weft::io::block_signals({SIGSTOP}), std::invalid_argument);
  try {
    weft::io::block_signals({SIGKILL});
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("SIGKILL cannot be caught") != std::string::npos);
  }
}
