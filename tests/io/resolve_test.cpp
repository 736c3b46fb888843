// weft/io/resolve.hpp: resolve() of names, numeric addresses and services, its errors,
// and tcp_stream::connect_host trying endpoints in order, on a uring_context, an
// io_pool and from a thread_pool.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <string>

#include "io_support.hpp"

using weft::io::endpoint;
using weft::io::resolve_error;
using weft::io::resolve_result;

namespace {

weft::task<resolve_result> lookup(std::string host, std::string service,
                                  weft::io::address_family f = weft::io::address_family::any) {
  co_return co_await weft::io::resolve(std::move(host), std::move(service), f);
}

bool has(const resolve_result& r, const std::string& text) {
  return std::any_of(r.endpoints.begin(), r.endpoints.end(), [&](const endpoint& e) { return e.to_string() == text; });
}

}  // namespace

TEST_CASE("resolve: names, numeric addresses and services", "[io][resolve]") {
  weft::thread_pool pool{{.threads = 2}};
  const auto local = weft::sync_wait(pool, lookup("localhost", "8080", weft::io::address_family::ipv4));
  REQUIRE_FALSE(local.ec);
  CHECK(has(local, "127.0.0.1:8080"));
  const auto numeric = weft::sync_wait(pool, lookup("127.0.0.1", "443"));
  REQUIRE_FALSE(numeric.ec);
  REQUIRE(numeric.endpoints.size() == 1);
  CHECK(numeric.endpoints[0].to_string() == "127.0.0.1:443");
  const auto named_service = weft::sync_wait(pool, lookup("127.0.0.1", "http"));
  if (!named_service.ec) {  // /etc/services may be missing in a container
    CHECK(has(named_service, "127.0.0.1:80"));
  } else {
    WARN("the service name 'http' does not resolve here: " << named_service.ec.message());
  }
}

TEST_CASE("resolve: errors are error codes with the resolver's message", "[io][resolve]") {
  weft::thread_pool pool{{.threads = 1}};
  const auto bad_host = weft::sync_wait(pool, lookup("no-such-host.invalid", "80"));
  INFO(bad_host.ec.category().name() << ": " << bad_host.ec.message());
  // Not found, or (a machine without a name server) not reachable now: never a value.
  CHECK((bad_host.ec == resolve_error::host_not_found || bad_host.ec == resolve_error::try_again ||
         bad_host.ec == resolve_error::failure));
  CHECK(bad_host.endpoints.empty());
  CHECK_FALSE(bad_host.ec.message().empty());
  const auto bad_service = weft::sync_wait(pool, lookup("127.0.0.1", "no-such-service"));
  CHECK(bad_service.ec == resolve_error::service_not_found);
  CHECK(std::string(bad_service.ec.category().name()) == "weft.resolve");
  CHECK(weft::sync_wait(pool, lookup("", "80")).ec == std::errc::invalid_argument);
  CHECK(weft::sync_wait(pool, lookup("localhost", "")).ec == std::errc::invalid_argument);
}

TEST_CASE("resolve: tcp_stream::connect_host tries the endpoints in order", "[io][resolve]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  weft::io::tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const std::uint16_t port = l.local_endpoint().port();
  const auto ok = weft::sync_wait(*io, [&]() -> weft::task<bool> {
    weft::io::tcp_stream c(*io);
    // "localhost" may list ::1 first, where nothing listens: the next endpoint serves.
    const auto ec = co_await c.connect_host("localhost", port);
    if (ec) co_return false;
    auto [aec, s] = co_await l.accept();
    co_return !aec && c.is_open() && s.is_open();
  }());
  CHECK(ok);
  // A port nothing listens on: a plain socket's, bound and closed again.
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  endpoint any = endpoint::loopback(0);
  REQUIRE(::bind(probe, any.data(), any.size()) == 0);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&bound), &len) == 0);
  const std::uint16_t closed_port = endpoint::from(reinterpret_cast<sockaddr*>(&bound), len).port();
  ::close(probe);
  const auto refused = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
    weft::io::tcp_stream c(*io);
    co_return co_await c.connect_host("127.0.0.1", closed_port);
  }());
  CHECK(refused == std::errc::connection_refused);
  const auto unknown = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
    weft::io::tcp_stream c(*io);
    co_return co_await c.connect_host("no-such-host.invalid", 80);
  }());
  CHECK(unknown.category() == weft::io::resolve_category());
}
