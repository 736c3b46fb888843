// io/src/resolve.cpp: resolve() through getaddrinfo on the blocking pool, and
// tcp_stream::connect_host(host, port) (weft/io/resolve.hpp).
#include "weft/io/resolve.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <utility>

#include "weft/blocking.hpp"

namespace weft::io {

namespace {

// A name without addresses, or without addresses of the family asked for: reported as
// host_not_found, as Asio's resolver does (asio::error::host_not_found).
bool no_address(int rc) noexcept {
#ifdef EAI_ADDRFAMILY
  if (rc == EAI_ADDRFAMILY) return true;
#endif
  return rc == EAI_NODATA;
}

resolve_result lookup(const std::string& host, const std::string& service, address_family family) {
  addrinfo hints{};
  hints.ai_family = family == address_family::ipv4 ? AF_INET : family == address_family::ipv6 ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* list = nullptr;
  resolve_result r;
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc == EAI_SYSTEM) {
    r.ec = std::error_code(errno, std::system_category());
  } else if (rc == EAI_MEMORY) {
    r.ec = std::error_code(ENOMEM, std::system_category());  // as Asio reports it
  } else if (no_address(rc)) {
    r.ec = make_error_code(resolve_error::host_not_found);
  } else if (rc != 0) {
    r.ec = std::error_code(rc, resolve_category());
  } else {
    for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
      const endpoint e = endpoint::from(a->ai_addr, a->ai_addrlen);
      if (!e.empty()) r.endpoints.push_back(e);
    }
    ::freeaddrinfo(list);
    if (r.endpoints.empty()) r.ec = make_error_code(resolve_error::host_not_found);
  }
  return r;
}

}  // namespace

task<resolve_result> resolve(std::string host, std::string service, address_family family) {
  if (host.empty() || service.empty()) co_return resolve_result{std::make_error_code(std::errc::invalid_argument), {}};
  co_return co_await weft::spawn_blocking(lookup, std::move(host), std::move(service), family);
}

task<std::error_code> tcp_stream::connect_host(std::string host, std::uint16_t port) {
  auto [ec, endpoints] = co_await resolve(std::move(host), std::to_string(port));
  if (ec) co_return ec;
  // In the resolver's order; a failed connect leaves the stream closed, ready for the next.
  for (const endpoint& e : endpoints) {
    ec = co_await connect(e);
    if (!ec || ec == std::errc::operation_canceled) co_return ec;
  }
  co_return ec;
}

}  // namespace weft::io
