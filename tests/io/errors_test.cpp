// One connection handler over both backends: the same error checks (weft/io/error.hpp)
// classify eof, reset, refused, cancelled and timed out alike over io_uring and over
// Asio (whose codes use_task translates), and a local close() of a socket with a read or
// a write pending is cancelled on both. The io_uring half is skipped (with a WARN naming
// the cause) where io_uring is unavailable.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using asio::ip::tcp;
using weft::io::use_task;

namespace {

enum class outcome { ok, eof, reset, refused, cancelled, timed_out, other };

const char* name(outcome o) {
  switch (o) {
    case outcome::ok:
      return "ok";
    case outcome::eof:
      return "eof";
    case outcome::reset:
      return "reset";
    case outcome::refused:
      return "refused";
    case outcome::cancelled:
      return "cancelled";
    case outcome::timed_out:
      return "timed_out";
    case outcome::other:
      return "other";
  }
  return "?";
}

/// The handler's error logic, written once against weft/io/error.hpp's documented checks.
outcome classify(const std::error_code& ec) {
  if (!ec) return outcome::ok;
  if (ec == weft::io::error::eof) return outcome::eof;
  if (ec == std::errc::connection_reset) return outcome::reset;
  if (ec == std::errc::connection_refused) return outcome::refused;
  if (ec == std::errc::operation_canceled)
    return ec == weft::io::error::cancelled ? outcome::cancelled : outcome::other;
  if (ec == std::errc::timed_out) return ec == weft::io::error::timed_out ? outcome::timed_out : outcome::other;
  return outcome::other;
}

// eof, reset, refused, a cancel, a timeout, then a local close() while a read and while
// a write waits.
const std::vector<outcome> k_expected = {outcome::eof,       outcome::reset,     outcome::refused,  outcome::cancelled,
                                         outcome::timed_out, outcome::cancelled, outcome::cancelled};

/// Fills socket `fd`'s send path (its buffer and its peer's receive buffer: the peer
/// never reads), so that the next write waits.
void fill_send_buffer(int fd) {
  static char chunk[64 * 1024];
  while (::send(fd, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
  }
}

// Posted by a task that then waits in an operation on `s`: closes `s` once that task is
// suspended (the executors here have one thread).
template <class Socket>
weft::task<void> close_later(Socket& s) {
  s.close();
  co_return;
}

std::string names(const std::vector<outcome>& v) {
  std::string s;
  for (outcome o : v) s += std::string(name(o)) + " ";
  return s;
}

/// A plain blocking client socket connected to 127.0.0.1:port; -1 on failure.
int connect_plain(std::uint16_t port) { return weft_io_test::connect_plain(weft::io::endpoint::loopback(port)); }

/// Closes `fd` with a reset (SO_LINGER 0) instead of a FIN.
void reset_close(int fd) {
  const linger hard{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  ::close(fd);
}

/// A port nothing listens on (bound once, then released).
std::uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("io errors: one handler classifies every outcome alike over io_uring and Asio", "[io]") {
  // Asio, on its I/O thread.
  weft::io::asio_executor aio;
  tcp::acceptor acceptor(aio.context(), {asio::ip::address_v4::loopback(), 0});
  const std::uint16_t aport = acceptor.local_endpoint().port();
  auto over_asio = [&]() -> weft::task<std::vector<outcome>> {
    std::vector<outcome> got;
    char buf[16];
    for (const bool reset : {false, true}) {  // eof, then reset
      const int client = connect_plain(aport);
      auto [aec, s] = co_await acceptor.async_accept(use_task);
      REQUIRE_FALSE(aec);
      if (reset)
        reset_close(client);
      else
        ::close(client);
      auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_task);
      got.push_back(classify(ec));
    }
    tcp::socket refused(aio.context());
    got.push_back(
        classify(co_await refused.async_connect({asio::ip::address_v4::loopback(), closed_port()}, use_task)));
    const int client = connect_plain(aport);
    auto [aec, s] = co_await acceptor.async_accept(use_task);
    REQUIRE_FALSE(aec);
    weft::io::cancel_source stop;
    stop.request_cancel();
    auto [cec, cn] = co_await weft::io::with_cancel(s.async_read_some(asio::buffer(buf), use_task), stop);
    got.push_back(classify(cec));
    auto [tec, tn] = co_await weft::io::with_timeout(s.async_read_some(asio::buffer(buf), use_task), 10ms);
    got.push_back(classify(tec));
    weft::post(aio, close_later(s));
    auto [lec, ln] = co_await s.async_read_some(asio::buffer(buf), use_task);
    got.push_back(classify(lec));
    ::close(client);
    const int writer_peer = connect_plain(aport);
    auto [wec, w] = co_await acceptor.async_accept(use_task);
    REQUIRE_FALSE(wec);
    fill_send_buffer(w.native_handle());
    weft::post(aio, close_later(w));
    auto [bec, bn] = co_await w.async_write_some(asio::buffer(buf), use_task);
    got.push_back(classify(bec));
    ::close(writer_peer);
    co_return got;
  };
  const std::vector<outcome> asio_got = weft::sync_wait(aio, over_asio());
  INFO("Asio: " << names(asio_got));
  CHECK(asio_got == k_expected);

  // io_uring, on its loop thread: the same checks, the same outcomes.
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  weft::io::tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  const std::uint16_t uport = l.local_endpoint().port();
  auto over_uring = [&]() -> weft::task<std::vector<outcome>> {
    std::vector<outcome> got;
    char buf[16];
    for (const bool reset : {false, true}) {
      const int client = connect_plain(uport);
      auto [aec, s] = co_await l.accept();
      REQUIRE_FALSE(aec);
      if (reset)
        reset_close(client);
      else
        ::close(client);
      auto [ec, n] = co_await s.read_some(buf, sizeof buf);
      got.push_back(classify(ec));
    }
    weft::io::tcp_stream refused(*io);
    got.push_back(classify(co_await refused.connect(weft::io::endpoint::loopback(closed_port()))));
    const int client = connect_plain(uport);
    auto [aec, s] = co_await l.accept();
    REQUIRE_FALSE(aec);
    weft::io::cancel_source stop;
    stop.request_cancel();
    auto [cec, cn] = co_await weft::io::with_cancel(s.read_some(buf, sizeof buf), stop);
    got.push_back(classify(cec));
    auto [tec, tn] = co_await weft::io::with_timeout(s.read_some(buf, sizeof buf), 10ms);
    got.push_back(classify(tec));
    weft::post(*io, close_later(s));
    auto [lec, ln] = co_await s.read_some(buf, sizeof buf);
    got.push_back(classify(lec));
    ::close(client);
    const int writer_peer = connect_plain(uport);
    auto [wec, w] = co_await l.accept();
    REQUIRE_FALSE(wec);
    fill_send_buffer(w.native_handle());
    weft::post(*io, close_later(w));
    auto [bec, bn] = co_await w.write_some(buf, sizeof buf);
    got.push_back(classify(bec));
    ::close(writer_peer);
    co_return got;
  };
  const std::vector<outcome> uring_got = weft::sync_wait(*io, over_uring());
  INFO("io_uring: " << names(uring_got));
  CHECK(uring_got == k_expected);
  CHECK(uring_got == asio_got);
}

namespace {

weft::task<void> sleep_an_hour(weft::io::uring_context& io) {
  (void)co_await weft::io::sleep_for(io, std::chrono::hours(1));
}

}  // namespace

TEST_CASE("io errors: a full ring whose submissions keep failing aborts with a message instead of spinning",
          "[io][uring]") {
  if (WEFT_TSAN) return;  // a child forked from a threaded process starts threads: not under TSan
  if (!weft_io_test::make_uring_or_skip()) return;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(30);                 // a spinning loop ends with SIGALRM
    ::signal(SIGABRT, SIG_DFL);  // not Catch2's handler: the parent reads the signal
    if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, 2);  // the loop's complaints
    weft::io::uring_context io{{.entries = 8}};
    weft_io_test::round_trip(io);  // the loop runs, and waits in the kernel
    if (!weft_io_test::forbid_syscall(__NR_io_uring_enter, /*every_thread=*/true)) ::_exit(3);
    for (int i = 0; i < 64; ++i) weft::post(io, sleep_an_hour(io));  // more SQEs in one turn than the ring holds
    for (;;) ::pause();
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("child status " << status << (WIFSIGNALED(status) ? ", signal " : ", exit ")
                       << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status)));
  REQUIRE_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 3));  // the filter could not be set
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}
