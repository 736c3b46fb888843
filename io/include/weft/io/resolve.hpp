// weft/io/resolve.hpp: host and service names to endpoints, off the executor's threads.
//
//   auto [ec, eps] = co_await weft::io::resolve("db.internal", "5432");
//   if (auto ec = co_await conn.connect_host("db.internal", 5432)) ...   // tcp_stream
//
// getaddrinfo blocks (files, DNS), so it runs through weft::spawn_blocking on the
// default blocking pool (weft/blocking.hpp) and the task resumes where it awaited.
#pragma once

#include <string>
#include <system_error>
#include <vector>

#include "weft/io/resolve_error.hpp"
#include "weft/io/tcp.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// What resolve() yields: `ec` empty and at least one endpoint, in getaddrinfo's order
/// (the system's preference: RFC 6724), or `ec` set and no endpoint.
struct resolve_result {
  std::error_code ec;
  std::vector<endpoint> endpoints;
};

/// Which addresses resolve() asks for.
enum class address_family { any, ipv4, ipv6 };

/// The TCP endpoints of `host` (a name or a numeric address) and `service` (a port
/// number or a service name such as "https"). Errors: std::errc::invalid_argument for
/// an empty host or service, resolve_error (weft/io/resolve_error.hpp) from getaddrinfo; a stop of the
/// task's token before the lookup started throws weft::cancelled (weft::spawn_blocking).
/// From a weft task; allocates.
task<resolve_result> resolve(std::string host, std::string service, address_family family = address_family::any);

}  // namespace weft::io
