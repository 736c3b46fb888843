// weft/io/cancel.hpp: weft::io::cancel_source, a std::stop_source under the I/O layer's
// older names. weft has one cancellation model, std::stop_token (weft/stop.hpp):
// with_cancel takes a std::stop_token, and a cancel_source is a stop source whose
// token it hands over.
#pragma once

#include <stop_token>
#include <utility>

namespace weft::io {

/// A cancellation request shared by any number of operations (with_cancel): a
/// std::stop_source. Once request_cancel() was called, every operation listening ends
/// with weft::io::error::cancelled (== std::errc::operation_canceled, over either
/// backend), and so does every operation started with it later. Copies share the same
/// state. Thread-safe.
class cancel_source {
 public:
  /// A fresh source, not cancelled. Throws std::bad_alloc.
  cancel_source() = default;
  /// Adopts `source` (sharing its state).
  explicit cancel_source(std::stop_source source) noexcept : m_source(std::move(source)) {}

  /// Requests cancellation: request_stop() on the source; idempotent. Thread-safe, never
  /// blocks on I/O (operations listening hand the request to their I/O thread).
  void request_cancel() noexcept { m_source.request_stop(); }
  /// True once request_cancel() (or request_stop() on the source) was called. Thread-safe.
  bool cancel_requested() const noexcept { return m_source.stop_requested(); }
  /// The token operations listen to. Thread-safe.
  std::stop_token get_token() const noexcept { return m_source.get_token(); }
  /// The std::stop_source itself (request_stop() on it is request_cancel()). Thread-safe.
  const std::stop_source& source() const noexcept { return m_source; }

 private:
  std::stop_source m_source;
};

}  // namespace weft::io
