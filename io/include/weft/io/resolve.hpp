// weft/io/resolve.hpp: host and service names to endpoints, off the executor's threads.
//
//   auto [ec, eps] = co_await weft::io::resolve("db.internal", "5432");
//   if (auto ec = co_await conn.connect_host("db.internal", 5432)) ...   // tcp_stream
//
// getaddrinfo blocks (files, DNS), so it runs through weft::spawn_blocking on the
// default blocking pool (weft/blocking.hpp) and the task resumes where it awaited.
#pragma once

#include <netdb.h>

#include <string>
#include <system_error>
#include <vector>

#include "weft/io/tcp.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// getaddrinfo's failures, in resolve_category(): the values are the EAI_* codes, the
/// messages gai_strerror's. EAI_SYSTEM is reported as the errno it carries instead
/// (std::system_category), EAI_MEMORY as std::errc::not_enough_memory.
enum class resolve_error {
  host_not_found = EAI_NONAME,      ///< no such host, or no address of the family asked for
  try_again = EAI_AGAIN,            ///< the name server failed for now (or cannot be reached)
  failure = EAI_FAIL,               ///< the name server failed for good
  service_not_found = EAI_SERVICE,  ///< no such service (port name) for TCP
  family_not_supported = EAI_FAMILY,
};

/// The category of resolve_error ("weft.resolve"). Thread-safe.
const std::error_category& resolve_category() noexcept;
/// Makes an error_code of resolve_category().
inline std::error_code make_error_code(resolve_error e) noexcept { return {static_cast<int>(e), resolve_category()}; }

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
/// an empty host or service, resolve_error (above) from getaddrinfo; a stop of the
/// task's token before the lookup started throws weft::cancelled (weft::spawn_blocking).
/// From a weft task; allocates.
task<resolve_result> resolve(std::string host, std::string service, address_family family = address_family::any);

}  // namespace weft::io

template <>
struct std::is_error_code_enum<weft::io::resolve_error> : std::true_type {};
