// weft/io/resolve_error.hpp: the error codes of name resolution, shared by both backends.
//
// weft::io::resolve (weft/io/resolve.hpp) reports getaddrinfo's failures in
// resolve_category(); use_task (weft/io/use_task.hpp) moves an Asio resolver's failures
// (asio::error::host_not_found, service_not_found, ...) into the same codes, so that
//   if (ec == weft::io::resolve_error::host_not_found) ...
// holds for the same lookup over either backend. Header-only but for the category
// object, which comes with the core library (as weft.io's, weft/io/error.hpp), so that
// it needs neither liburing nor Asio.
#pragma once

#include <netdb.h>

#include <system_error>

namespace weft::io {

/// getaddrinfo's failures, in resolve_category(): the values are the EAI_* codes, the
/// messages gai_strerror's. EAI_SYSTEM is reported as the errno it carries instead
/// (std::system_category), EAI_MEMORY as ENOMEM (std::system_category, == std::errc::
/// not_enough_memory); EAI_NODATA and EAI_ADDRFAMILY (a name without addresses, or none
/// of the family asked for) as host_not_found. The same as an Asio resolver's failures
/// after use_task (weft/io/use_task.hpp).
enum class resolve_error {
  host_not_found = EAI_NONAME,      ///< no such host, or no address of the family asked for
  try_again = EAI_AGAIN,            ///< the name server failed for now (or cannot be reached)
  failure = EAI_FAIL,               ///< the name server failed for good
  service_not_found = EAI_SERVICE,  ///< no such service (port name) for TCP
  /// The address family is not supported; equal (as an error_condition) to
  /// std::errc::address_family_not_supported, which is how Asio reports it.
  family_not_supported = EAI_FAMILY,
};

/// The category of resolve_error ("weft.resolve"). Thread-safe.
const std::error_category& resolve_category() noexcept;
/// Makes an error_code of resolve_category(). Thread-safe.
inline std::error_code make_error_code(resolve_error e) noexcept { return {static_cast<int>(e), resolve_category()}; }

}  // namespace weft::io

/// Lets weft::io::resolve_error convert to std::error_code (through make_error_code).
template <>
struct std::is_error_code_enum<weft::io::resolve_error> : std::true_type {};
