// The io_uring backend's noexcept paths that hand work to the loop thread, run while
// the calling thread cannot allocate: tcp_listener::close() and a cancel_source firing
// for with_cancel must still reach the loop (they queue nodes they own; no memory is
// needed). This binary replaces the global operator new so that one thread's
// allocations can be made to fail; it is its own test program so that nothing else runs
// with that replacement. Skipped (with a WARN) where io_uring is unavailable.
#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "io_support.hpp"

using namespace std::chrono_literals;

namespace {
thread_local bool t_fail_new = false;  // this thread's operator new throws std::bad_alloc

/// While alive, the constructing thread cannot allocate through operator new.
struct no_memory {
  no_memory() noexcept { t_fail_new = true; }
  ~no_memory() { t_fail_new = false; }
  no_memory(const no_memory&) = delete;
  no_memory& operator=(const no_memory&) = delete;
};
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail_new) throw std::bad_alloc{};
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc{};
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

TEST_CASE("uring: close() and cancellation from another thread need no memory", "[uring]") {
  {
    no_memory guard;
    CHECK_THROWS_AS(::operator new(16), std::bad_alloc);  // the switch works
  }
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;

    // A pending accept, on the loop thread; the listener closed from this thread.
    weft::io::tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
    std::atomic<bool> accepting{false};
    std::error_code aec;
    weft_io_test::completion_count accept_ended;
    auto acceptor = [&]() -> weft::task<void> {
      accepting.store(true);
      auto [e, s] = co_await l.accept();
      aec = e;
      accept_ended.arrive();
    };
    weft::post(*io, acceptor());
    while (!accepting.load()) std::this_thread::yield();
    weft_io_test::round_trip(*io);  // the accept is submitted before the close is taken
    {
      no_memory guard;
      l.close();  // noexcept: before, queueing it could need memory (std::terminate)
    }
    REQUIRE(accept_ended.wait_for(1, 10s));
    CHECK(aec == std::errc::operation_canceled);

    // with_cancel over a ring operation: the source fires here, without memory.
    weft::io::cancel_source stop;
    std::atomic<bool> sleeping{false};
    std::error_code sec;
    weft_io_test::completion_count slept;
    auto sleeper = [&]() -> weft::task<void> {
      sleeping.store(true);
      sec = co_await weft::io::with_cancel(weft::io::sleep_for(*io, 30s), stop);
      slept.arrive();
    };
    const auto t0 = std::chrono::steady_clock::now();
    weft::post(*io, sleeper());
    while (!sleeping.load()) std::this_thread::yield();
    weft_io_test::round_trip(*io);  // the sleep is submitted (and its token watched) before the cancel is taken
    {
      no_memory guard;
      stop.request_cancel();  // noexcept; hands the cancel to the loop
    }
    REQUIRE(slept.wait_for(1, 10s));
    CHECK(sec == std::errc::operation_canceled);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}
