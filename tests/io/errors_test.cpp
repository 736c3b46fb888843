// One connection handler over both backends: the same error checks (weft/io/error.hpp)
// classify eof, reset, refused, cancelled and timed out alike over io_uring and over
// Asio (whose codes use_task translates). The io_uring half is skipped (with a WARN
// naming the cause) where io_uring is unavailable.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
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

const std::vector<outcome> k_expected = {outcome::eof, outcome::reset, outcome::refused, outcome::cancelled,
                                         outcome::timed_out};

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
    ::close(client);
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
    ::close(client);
    co_return got;
  };
  const std::vector<outcome> uring_got = weft::sync_wait(*io, over_uring());
  INFO("io_uring: " << names(uring_got));
  CHECK(uring_got == k_expected);
  CHECK(uring_got == asio_got);
}
