// io/src/error.cpp: the weft.io and weft.resolve error categories.
#include "weft/io/error.hpp"

#include <netdb.h>

#include <cerrno>
#include <string>

#include "weft/io/resolve_error.hpp"

namespace weft::io {
namespace {

class io_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "weft.io"; }
  std::string message(int value) const override {
    switch (static_cast<error>(value)) {
      case error::eof:
        return "end of stream: the peer closed the connection";
      case error::timed_out:
        return "the operation timed out";
      case error::cancelled:
        return "the operation was cancelled";
      case error::uring_unavailable:
        return "io_uring is unavailable";
      case error::line_too_long:
        return "no delimiter within the line length limit";
    }
    return "unknown weft.io error " + std::to_string(value);
  }
  // So that `ec == std::errc::timed_out` holds for a weft timeout too.
  std::error_condition default_error_condition(int value) const noexcept override {
    switch (static_cast<error>(value)) {
      case error::timed_out:
        return std::errc::timed_out;
      case error::cancelled:
        return std::errc::operation_canceled;
      case error::line_too_long:
        return std::errc::message_size;
      default:
        return {value, *this};
    }
  }
};

// getaddrinfo's failures (weft/io/resolve_error.hpp): here, with the core library, so
// that the Asio bridge (use_task) reports resolver failures in it without liburing.
class resolve_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "weft.resolve"; }
  std::string message(int value) const override { return ::gai_strerror(value); }
  // So that `ec == std::errc::address_family_not_supported` holds for either backend:
  // Asio reports EAI_FAMILY as that errno.
  std::error_condition default_error_condition(int value) const noexcept override {
    if (value == static_cast<int>(resolve_error::family_not_supported)) return std::errc::address_family_not_supported;
    return {value, *this};
  }
};

}  // namespace

const std::error_category& io_category() noexcept {
  static const io_category_impl k_category;
  return k_category;
}

const std::error_category& resolve_category() noexcept {
  static const resolve_category_impl k_category;
  return k_category;
}

}  // namespace weft::io
