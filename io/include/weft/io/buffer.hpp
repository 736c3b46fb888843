// weft/io/buffer.hpp: receive buffers leased from a ring's pool, so that a connection
// waiting for data holds no buffer of its own.
//
//   auto [ec, buf] = co_await stream.receive();   // a buffer only once data arrived
//   if (ec) ...;                                   // error::eof at the end
//   consume(buf.data(), buf.size());               // then buf gives it back
//
// Each ring (a uring_context's, or each io_pool worker's) keeps one pool of
// uring_options::buffer_count buffers of buffer_size bytes, made at its first
// receive(). Where the kernel has provided buffer rings (Linux 5.19), the pool is
// registered with it and the kernel picks a buffer only when data arrives; elsewhere, or
// with uring_options::provided_buffers off, the ring waits for the socket to be readable
// and then takes a buffer itself. Either way a pending receive() holds no buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

namespace weft::io {

namespace detail {
class buffer_pool;
}

/// The bytes of one receive(), in a buffer of its ring's pool: move-only; destroying it
/// (or reset()) gives the buffer back. It may outlive its stream, and even its
/// uring_context or io_pool (the pool's memory goes with its last lease), and may be given
/// back from any thread (from another thread than its ring's, the ring takes it back at
/// its next turn). Not thread-safe itself (one owner).
class leased_buffer {
 public:
  /// Holds nothing.
  leased_buffer() noexcept = default;
  /// Takes over `o`'s buffer; `o` is left empty.
  leased_buffer(leased_buffer&& o) noexcept
      : m_pool(std::exchange(o.m_pool, nullptr)),
        m_data(std::exchange(o.m_data, nullptr)),
        m_size(std::exchange(o.m_size, 0)),
        m_id(o.m_id) {}
  /// Gives back the buffer held, then takes over `o`'s.
  leased_buffer& operator=(leased_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      m_pool = std::exchange(o.m_pool, nullptr);
      m_data = std::exchange(o.m_data, nullptr);
      m_size = std::exchange(o.m_size, 0);
      m_id = o.m_id;
    }
    return *this;
  }
  leased_buffer(const leased_buffer&) = delete;
  leased_buffer& operator=(const leased_buffer&) = delete;
  /// Gives the buffer back (as reset()).
  ~leased_buffer() { reset(); }

  /// The bytes received (null when empty). Writable: the buffer is the holder's until
  /// given back.
  std::byte* data() const noexcept { return m_data; }
  /// How many bytes were received (0 when empty).
  std::size_t size() const noexcept { return m_size; }
  /// True when it holds no buffer.
  bool empty() const noexcept { return m_pool == nullptr; }
  /// The bytes as a span.
  std::span<std::byte> bytes() const noexcept { return {m_data, m_size}; }
  /// The bytes as characters (text protocols).
  std::string_view chars() const noexcept { return {reinterpret_cast<const char*>(m_data), m_size}; }
  /// Gives the buffer back to its ring's pool now; then empty. Safe on any thread.
  void reset() noexcept;

 private:
  friend class detail::buffer_pool;
  leased_buffer(detail::buffer_pool* pool, std::byte* data, std::size_t size, std::uint16_t id) noexcept
      : m_pool(pool), m_data(data), m_size(size), m_id(id) {}

  detail::buffer_pool* m_pool = nullptr;
  std::byte* m_data = nullptr;
  std::size_t m_size = 0;
  std::uint16_t m_id = 0;
};

/// What receive() yields: `auto [ec, buf] = co_await stream.receive();`. On success `buf`
/// holds at least one byte; on failure it is empty.
struct receive_result {
  std::error_code ec;  ///< error::eof at the end, std::errc::no_buffer_space when the pool was empty
  leased_buffer buf;   ///< the bytes received
};

}  // namespace weft::io
