// weft/io/error.hpp: the error codes weft's I/O layer adds to the system ones.
//
// Every I/O operation reports failure as a std::error_code value, never by throwing:
// system errors (ECONNREFUSED, ECONNRESET, EINVAL, ...) in std::system_category, plus
// the conditions below. Both backends report in these categories (the Asio one
// translates at the use_task boundary, see use_task.hpp), so one handler written as
//   if (ec == weft::io::error::eof) ...                         // the peer closed its end
//   else if (ec == std::errc::operation_canceled) ...           // also == error::cancelled
//   else if (ec == std::errc::timed_out) ...                    // also == error::timed_out
//   else if (ec == std::errc::connection_reset) ...
// works unchanged over io_uring and over Asio.
#pragma once

#include <system_error>

namespace weft::io {

/// Conditions of weft's I/O layer that have no errno value (a plain value; compare an
/// error_code with them: `ec == weft::io::error::eof`).
enum class error {
  eof = 1,        ///< the peer closed its end: a read returned 0 bytes
  timed_out = 2,  ///< with_timeout: the time ran out and the operation was cancelled
  /// The operation was cancelled (cancel(), with_cancel, a closed listener's pending
  /// accept); equal (as an error_condition) to std::errc::operation_canceled.
  cancelled = 3,
  uring_unavailable = 4,  ///< io_uring cannot be used in this process
  /// buffered_reader::read_until: no delimiter within the line length limit. A code of
  /// its own, since no errno names it and std::errc::message_size on a stream would read
  /// as the socket's EMSGSIZE; equal (as an error_condition) to std::errc::message_size,
  /// the same event as a datagram larger than its buffer (the data did not fit the room
  /// given), so one `ec == std::errc::message_size` test covers both.
  line_too_long = 5,
};

/// The category of weft::io::error ("weft.io"). Thread-safe.
const std::error_category& io_category() noexcept;

/// Makes an error_code of io_category(). Thread-safe.
inline std::error_code make_error_code(error e) noexcept { return {static_cast<int>(e), io_category()}; }

}  // namespace weft::io

/// Lets weft::io::error convert to std::error_code (through make_error_code).
template <>
struct std::is_error_code_enum<weft::io::error> : std::true_type {};
