// io/src/error.cpp: the weft.io error category.
#include "weft/io/error.hpp"

#include <cerrno>
#include <string>

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
      default:
        return {value, *this};
    }
  }
};

}  // namespace

const std::error_category& io_category() noexcept {
  static const io_category_impl k_category;
  return k_category;
}

}  // namespace weft::io
