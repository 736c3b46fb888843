// weft/io/buffered_reader.hpp: lines and exact byte counts read from any stream through
// one buffer of fixed size.
//
//   weft::io::buffered_reader in(stream);                       // 8 KiB, allocated once
//   auto [ec, line] = co_await in.read_until("\r\n");           // "...\r\n", at most 8 KiB
//   auto [ec2, n] = co_await in.read_exact(body, length);       // buffered bytes first
//
// The reader reads ahead: one read of the stream takes as much as the buffer holds, and
// what follows a line stays buffered for the next call. The buffer never grows: a line
// longer than the limit is an error (error::line_too_long), not an allocation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

#include "weft/io/error.hpp"
#include "weft/io/tcp.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// A stream buffered_reader reads: `co_await s.read_some(buf, len)` (buf a void*, len a
/// std::size_t) yields a value with members `ec` (a std::error_code) and `n` (the bytes
/// stored in buf), as weft::io::io_result: error::eof at the end of the stream, at least
/// one byte otherwise (a read of 0 bytes without an error counts as the end too).
/// tcp_stream is one.
template <class S>
concept readable_stream = requires(S& s, void* buf, std::size_t len) { s.read_some(buf, len); };

/// What buffered_reader::read_until yields: `auto [ec, line] = co_await in.read_until("\n")`.
/// A plain value; `line` views the reader's buffer (valid until the reader's next read
/// or consume()).
struct line_result {
  std::error_code ec;     ///< empty when a line was found (see buffered_reader::read_until)
  std::string_view line;  ///< the line, delimiter included; on an error the unfinished line
};

/// Reads a readable_stream (tcp_stream, or any type with its read_some) through a buffer
/// of `capacity` bytes, allocated once by the constructor: lines up to a delimiter
/// (read_until), exact byte counts (read_exact) and what is there (read_some), each
/// serving the bytes read ahead first. Holds a reference to the stream, which must
/// outlive it; the other operations of the stream (writes, close(), cancel()) stay the
/// caller's. Not thread-safe: one operation at a time, each awaited before the next
/// starts (from any thread, as the stream allows); the stream must not be read
/// elsewhere meanwhile, or the bytes read ahead come out of order. Every operation is a
/// weft::task run under the awaiting task's stop token, so a stop (a scope's, a
/// weft::with_timeout) ends the stream read it waits in, with the stream's error
/// (std::errc::operation_canceled), and no byte read is lost: a later call goes on from
/// where it stopped. An error the stream yields together with bytes (tcp_stream never
/// does) is reported by the next call that would read the stream, after those bytes.
/// Move-only (not while an operation is in flight).
template <readable_stream Stream>
class buffered_reader {
 public:
  /// The buffer size of a reader made without one: 8 KiB.
  static constexpr std::size_t default_capacity = 8192;

  /// A reader of `stream` with a buffer of `capacity` bytes, which is also the longest
  /// line read_until accepts. Throws std::invalid_argument for a capacity of 0,
  /// std::bad_alloc when the buffer cannot be allocated.
  explicit buffered_reader(Stream& stream, std::size_t capacity = default_capacity)
      : m_stream(&stream), m_buf(make_buffer(capacity)), m_cap(capacity) {}
  /// Takes over `o`'s stream, buffer and buffered bytes; `o` is left with no buffer
  /// (only destruction and assignment are valid on it).
  buffered_reader(buffered_reader&& o) noexcept
      : m_stream(o.m_stream),
        m_buf(std::move(o.m_buf)),
        m_cap(std::exchange(o.m_cap, 0)),
        m_begin(std::exchange(o.m_begin, 0)),
        m_end(std::exchange(o.m_end, 0)),
        m_pending(std::exchange(o.m_pending, {})) {}
  /// Drops this reader's buffered bytes, then takes over `o`'s as the move constructor.
  buffered_reader& operator=(buffered_reader&& o) noexcept {
    m_stream = o.m_stream;
    m_buf = std::move(o.m_buf);
    m_cap = std::exchange(o.m_cap, 0);
    m_begin = std::exchange(o.m_begin, 0);
    m_end = std::exchange(o.m_end, 0);
    m_pending = std::exchange(o.m_pending, {});
    return *this;
  }

  /// Up to `len` bytes into `buf`: {ec, n}. The buffered bytes when there are any (no
  /// read of the stream), else one read of the stream: straight into `buf` when `len`
  /// is at least the capacity, else into the buffer, keeping what does not fit `buf`.
  /// Errors: the stream's (error::eof at its end), with n == 0. `len` 0 yields {} at
  /// once. `buf` must stay valid until the task completes.
  task<io_result> read_some(void* buf, std::size_t len) {
    if (len == 0) co_return io_result{};
    if (m_begin == m_end) {
      if (m_pending) co_return io_result{std::exchange(m_pending, {}), 0};
      if (len >= m_cap) co_return settle(co_await m_stream->read_some(buf, len), len);
      const io_result r = settle(co_await m_stream->read_some(m_buf.get(), m_cap), m_cap);
      m_end = r.n;
      if (r.ec) co_return r;
    }
    co_return io_result{{}, take(static_cast<char*>(buf), len)};
  }

  /// All `len` bytes into `buf`: {ec, n}. The buffered bytes first, then reads of the
  /// stream until `len` bytes are stored: straight into `buf` while what is missing is
  /// at least the capacity, else through the buffer (the bytes beyond `len` stay
  /// buffered). {{}, len} on success; else the stream's error with `n` the bytes stored
  /// in `buf` so far (which are consumed): error::eof when the stream ended first.
  /// `buf` must stay valid until the task completes.
  task<io_result> read_exact(void* buf, std::size_t len) {
    char* const out = static_cast<char*>(buf);
    std::size_t done = take(out, len);
    while (done < len) {
      if (m_pending) co_return io_result{std::exchange(m_pending, {}), done};
      const std::size_t want = len - done;
      if (want >= m_cap) {
        const io_result r = settle(co_await m_stream->read_some(out + done, want), want);
        done += r.n;
        if (r.ec) co_return io_result{r.ec, done};
      } else {
        // Empty here (take() above or in the last turn emptied it): read to the front.
        const io_result r = settle(co_await m_stream->read_some(m_buf.get(), m_cap), m_cap);
        m_end = r.n;
        if (r.ec) co_return io_result{r.ec, done};
        done += take(out + done, want);
      }
    }
    co_return io_result{{}, len};
  }

  /// The next line: the bytes up to and including the first `delimiter` ("\n", "\r\n",
  /// any non-empty string), which are consumed: {{}, line}. `max` is the longest line
  /// accepted, delimiter included (the capacity when larger). Reads the stream as often
  /// as it takes, each read as much as the buffer holds; what follows the line stays
  /// buffered for the next call. `line` views the buffer: valid until the reader's next
  /// read (read_some, read_exact, read_until) or consume(). The delimiter is included so
  /// that a line of `max` bytes is `max` bytes long, and a complete line tells itself
  /// from an unfinished one (line.ends_with).
  /// Errors consume nothing: `line` then views the unfinished line (the bytes buffered,
  /// at most `max`), which stays buffered (buffered() begins with it; consume(
  /// line.size()) drops it, a retry after a stop goes on with it):
  /// - error::line_too_long (== std::errc::message_size): `max` bytes and no delimiter
  ///   among them; `line` is those `max` bytes;
  /// - error::eof: the stream ended before a delimiter; `line` is what came after the
  ///   last line (empty when the stream ended between lines);
  /// - the stream's other errors (a stop's operation_canceled, a reset, ...);
  /// - std::errc::invalid_argument: an empty `delimiter`, or `max` shorter than it.
  /// `delimiter` must stay valid until the task completes (a literal, or a string alive
  /// across the co_await).
  task<line_result> read_until(std::string_view delimiter, std::size_t max) {
    if (delimiter.empty() || max < delimiter.size())
      co_return line_result{std::make_error_code(std::errc::invalid_argument), {}};
    max = std::min(max, m_cap);
    std::size_t searched = 0;  // leading bytes of the buffered ones known to hold no delimiter
    for (;;) {
      const std::string_view data = buffered();
      const std::string_view window = data.substr(0, max);
      // A delimiter split across two reads begins in the last delimiter.size() - 1
      // bytes searched: search again from there.
      const std::size_t from = searched < delimiter.size() ? 0 : searched - (delimiter.size() - 1);
      if (const std::size_t at = window.find(delimiter, from); at != std::string_view::npos) {
        const std::string_view line = window.substr(0, at + delimiter.size());
        advance(line.size());  // only indices change: `line` stays valid until the next read
        co_return line_result{{}, line};
      }
      if (window.size() == max) co_return line_result{make_error_code(error::line_too_long), window};
      if (m_pending) co_return line_result{std::exchange(m_pending, {}), window};
      searched = window.size();
      compact();  // the unfinished line to the front: room for `max` bytes from there
      const io_result r = settle(co_await m_stream->read_some(m_buf.get() + m_end, m_cap - m_end), m_cap - m_end);
      m_end += r.n;
      if (r.ec) co_return line_result{r.ec, buffered().substr(0, max)};
    }
  }
  /// read_until(delimiter, capacity()): lines up to the buffer's size.
  task<line_result> read_until(std::string_view delimiter) { return read_until(delimiter, m_cap); }

  /// The bytes read ahead and not consumed yet: what the next read_some or read_exact
  /// returns first. Valid until the reader's next read or consume(). Never blocks.
  std::string_view buffered() const noexcept { return {m_buf.get() + m_begin, m_end - m_begin}; }
  /// Drops the first `n` buffered bytes (all of them when `n` is larger). Never blocks.
  void consume(std::size_t n) noexcept { advance(std::min(n, m_end - m_begin)); }
  /// The buffer's size: the most bytes read ahead, and the longest line.
  std::size_t capacity() const noexcept { return m_cap; }
  /// The stream read.
  Stream& stream() const noexcept { return *m_stream; }

 private:
  static std::unique_ptr<char[]> make_buffer(std::size_t capacity) {
    if (capacity == 0) throw std::invalid_argument("weft::io::buffered_reader: the capacity must not be 0");
    return std::make_unique_for_overwrite<char[]>(capacity);
  }

  // The stream's result as an io_result of at most `len` bytes: a read of 0 bytes without
  // an error is the end of the stream; an error that came with bytes is kept in
  // m_pending for the next call that would read, so that the bytes are delivered first.
  template <class R>
  io_result settle(const R& r, std::size_t len) noexcept {
    io_result out{r.ec, std::min(static_cast<std::size_t>(r.n), len)};
    if (out.n == 0 && !out.ec) out.ec = make_error_code(error::eof);
    if (out.n > 0 && out.ec) m_pending = std::exchange(out.ec, {});
    return out;
  }
  // Copies up to `len` buffered bytes to `out` and consumes them; returns how many.
  std::size_t take(char* out, std::size_t len) noexcept {
    const std::size_t n = std::min(len, m_end - m_begin);
    if (n > 0) std::memcpy(out, m_buf.get() + m_begin, n);
    advance(n);
    return n;
  }
  void advance(std::size_t n) noexcept {
    m_begin += n;
    if (m_begin == m_end) m_begin = m_end = 0;
  }
  // Moves the buffered bytes to the front of the buffer (at most once per read_until:
  // nothing is consumed until it returns).
  void compact() noexcept {
    if (m_begin == 0) return;
    std::memmove(m_buf.get(), m_buf.get() + m_begin, m_end - m_begin);
    m_end -= m_begin;
    m_begin = 0;
  }

  Stream* m_stream;
  std::unique_ptr<char[]> m_buf;
  std::size_t m_cap;
  // The buffered bytes are [m_begin, m_end); both are 0 when there are none.
  std::size_t m_begin = 0;
  std::size_t m_end = 0;
  std::error_code m_pending;  // an error the stream reported with bytes, reported next
};

}  // namespace weft::io
