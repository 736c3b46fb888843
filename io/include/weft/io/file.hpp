// weft/io/file.hpp: files over the io_uring backend: open, positional and sequential
// reads and writes, fsync, size, close, and read_file / write_file.
//
//   weft::io::file f(io);
//   if (auto ec = co_await f.open("data.bin", O_RDONLY)) ...
//   auto [ec, n] = co_await f.read_at(buf, sizeof buf, offset);   // n == 0 past the end
//   auto [ec2, bytes] = co_await weft::io::read_file(io, "/etc/app.conf");
//
// Every operation is an io_uring operation (openat, read, write, fsync, statx, close) on
// the ring of the worker the task runs on (an io_pool) or the context's: a task never
// blocks its worker on the disk; the kernel completes page-cache hits inline and hands
// the rest to its own workers. Each operation takes the awaiting task's stop token and
// weft::io::with_timeout / with_cancel as the socket operations do; a read or write the
// kernel has begun on a regular file may still finish (its result is then kept).
// Failures are std::error_code values (system errors in std::system_category), never
// exceptions. The end of a file is not a failure for a positional read (read_at,
// read_all_at: a short count, 0 bytes at or past the end, as pread); the stream form
// (read_some, at the file position) yields error::eof there, as every weft stream does.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "weft/io/tcp.hpp"
#include "weft/io/uring_context.hpp"
#include "weft/task.hpp"

namespace weft::io {

/// What file::size() yields: the size in bytes, or the failure.
struct size_result {
  std::error_code ec;
  std::uint64_t size = 0;
};

class file;

namespace detail {

/// open(): an openat on the ring; the file adopts the new fd.
class file_open_awaitable : public uring_awaitable {
 public:
  file_open_awaitable(uring_context& ctx, file& f, std::string path, int flags, mode_t mode) noexcept;
  file_open_awaitable(file_open_awaitable&& o) noexcept;
  file_open_awaitable& operator=(file_open_awaitable&&) = delete;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  bool await_ready() const noexcept { return static_cast<bool>(m_early); }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    m_op.m_arg = this;  // here: the awaitable may have been moved since it was made
    return uring_awaitable::await_suspend(h);
  }
  std::error_code await_resume() const noexcept;

 private:
  static void prep(::io_uring_sqe* sqe, uring_op& op);

  file* m_file;
  std::string m_path;
  int m_flags;
  mode_t m_mode;
  std::error_code m_early;
};

/// read_all_at / write_all_at (a read or write, again after a partial one, on the loop
/// thread), at an offset or at the file position. weft::with_timeout applies, not the
/// linked weft::io::with_timeout (one timeout for several SQEs).
class file_transfer_awaitable : public socket_awaitable {
 public:
  file_transfer_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, bool write, bool all, void* buf,
                          std::size_t len, std::uint64_t offset) noexcept;
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    m_op.m_arg = this;  // here: the awaitable may have been moved since it was made
    return socket_awaitable::await_suspend(h);
  }
  io_result await_resume() const noexcept;

 private:
  static void prep(::io_uring_sqe* sqe, uring_op& op);
  static bool on_cqe(uring_op& op, int res, unsigned flags);

  bool m_write;
  bool m_all;
  bool m_stopped = false;  // a stop ended it between two transfers
  std::size_t m_total;
  std::size_t m_done = 0;
  std::uint64_t m_offset;  // k_position: the file position
};

/// read_at / write_at / read_some / write_some: one read or write.
class file_once_awaitable : public file_transfer_awaitable {
 public:
  using file_transfer_awaitable::file_transfer_awaitable;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
};

/// fsync / fdatasync / size (statx) / async_close: one operation yielding a status.
class file_status_awaitable : public socket_awaitable {
 public:
  enum class what : std::uint8_t { fsync, fdatasync, size, close };
  file_status_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, what w, std::error_code early,
                        file* closing = nullptr) noexcept;
  static constexpr bool k_linked_timeout_ok = true;  // with_timeout applies
  bool await_ready() const noexcept { return static_cast<bool>(m_early); }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    m_op.m_arg = this;  // here: the awaitable may have been moved since it was made
    if (m_what == what::close) {
      if (!take_fd()) return false;              // no file: bad_file_descriptor
      return uring_awaitable::await_suspend(h);  // the number is this operation's alone now
    }
    return socket_awaitable::await_suspend(h);
  }
  /// size: {ec, bytes}; the others: {ec, 0}.
  size_result await_resume() const noexcept;

 private:
  static void prep(::io_uring_sqe* sqe, uring_op& op);
  bool take_fd() noexcept;

  what m_what;
  std::error_code m_early;
  file* m_closing;  // async_close: the file whose number it takes when awaited
  struct statx m_stx{};
};

}  // namespace detail

/// An open file of a uring_context (either kind, as tcp_stream), or none. Move-only;
/// closes on destruction. Operations may be awaited from any thread, several at once
/// (positional reads and writes at different offsets do not disturb each other; the
/// sequential read_some / write_some share the file position, as read(2) does);
/// close() may be called from any thread at any time (operations not yet begun end
/// with error::cancelled; one the kernel is running may finish). The context must
/// outlive it. read_some / write_some / write_all make it a stream for the generic
/// algorithms (buffered_reader) over a pipe, a FIFO or a terminal as much as a file. A
/// write to a pipe whose reader is gone raises SIGPIPE, as write(2) does (sockets never
/// do: they send with MSG_NOSIGNAL): a service that writes to pipes ignores SIGPIPE
/// (`std::signal(SIGPIPE, SIG_IGN)`) and gets broken_pipe.
class file {
 public:
  /// The file position (read_some / write_some), as an offset.
  static constexpr std::uint64_t k_position = std::numeric_limits<std::uint64_t>::max();

  /// A file object with nothing open (open() opens one).
  explicit file(uring_context& ctx) noexcept : m_ctx(&ctx) {}
  /// Adopts the open file descriptor `fd` (closed by this object).
  file(uring_context& ctx, int fd) noexcept;
  /// Takes over `o`'s file; `o` is left with none.
  file(file&& o) noexcept;
  file& operator=(file&&) = delete;
  /// Closes the file, if open (as close()).
  ~file();

  /// Opens `path` (relative to the working directory) with open(2)'s `flags` (O_RDONLY,
  /// O_WRONLY | O_CREAT | O_TRUNC, O_APPEND, O_DIRECT...; O_CLOEXEC is always added) and,
  /// when a file is created, `mode` (less the umask): `if (auto ec = co_await f.open(p))`.
  /// Errors: the system's (no_such_file_or_directory, permission_denied, ...),
  /// invalid_argument (an empty path or one with a NUL byte), device_or_resource_busy
  /// (this object has a file open already).
  detail::file_open_awaitable open(std::string path, int flags = O_RDONLY, mode_t mode = 0644) noexcept;

  /// Reads up to `len` bytes at `offset`: {ec, n}; n == 0 (no error) at or past the end.
  detail::file_once_awaitable read_at(void* buf, std::size_t len, std::uint64_t offset) noexcept {
    return {*m_ctx, m_desc, m_id, false, false, buf, len, offset};
  }
  /// Writes up to `len` bytes at `offset` (at the end when opened with O_APPEND): {ec, n}.
  detail::file_once_awaitable write_at(const void* buf, std::size_t len, std::uint64_t offset) noexcept {
    return {*m_ctx, m_desc, m_id, true, false, const_cast<void*>(buf), len, offset};
  }
  /// Reads until `len` bytes are in `buf` or the file ends: {ec, n}; n < len (no error)
  /// when the end came first.
  detail::file_transfer_awaitable read_all_at(void* buf, std::size_t len, std::uint64_t offset) noexcept {
    return {*m_ctx, m_desc, m_id, false, true, buf, len, offset};
  }
  /// Writes all `len` bytes at `offset` (as many writes as it takes): {ec, bytes written}.
  detail::file_transfer_awaitable write_all_at(const void* buf, std::size_t len, std::uint64_t offset) noexcept {
    return {*m_ctx, m_desc, m_id, true, true, const_cast<void*>(buf), len, offset};
  }
  /// read_at(buf, len, k_position): reads at the file position and advances it;
  /// error::eof at the end (the stream form, for the generic stream algorithms).
  detail::file_once_awaitable read_some(void* buf, std::size_t len) noexcept { return read_at(buf, len, k_position); }
  /// write_at(buf, len, k_position): writes at the file position and advances it.
  detail::file_once_awaitable write_some(const void* buf, std::size_t len) noexcept {
    return write_at(buf, len, k_position);
  }
  /// write_all_at(buf, len, k_position).
  detail::file_transfer_awaitable write_all(const void* buf, std::size_t len) noexcept {
    return write_all_at(buf, len, k_position);
  }

  /// Flushes the file's data and metadata to the device (fsync(2)): `.ec`.
  detail::file_status_awaitable fsync() noexcept;
  /// Flushes the file's data, and only the metadata needed to read it (fdatasync(2)): `.ec`.
  detail::file_status_awaitable fdatasync() noexcept;
  /// The file's size in bytes (statx): {ec, size}.
  detail::file_status_awaitable size() noexcept;
  /// Closes the file through the ring and reports close(2)'s error (where a network file
  /// system reports a failed write): `.ec`. The object is left with no file at once. No
  /// operation of the file may be in flight (else: use close(), which waits for them);
  /// without a file: bad_file_descriptor.
  detail::file_status_awaitable async_close() noexcept;
  /// Closes the file (pending operations as the class comment says); the number is closed
  /// once no operation of it can reach the kernel. Idempotent; any thread.
  void close() noexcept;

  /// True while a file is open.
  bool is_open() const noexcept { return m_desc != nullptr && !m_desc->closed(); }
  /// The file descriptor, or -1; still owned by the object.
  int native_handle() const noexcept { return is_open() ? m_desc->fd() : -1; }
  /// The uring_context its operations run on.
  uring_context& context() const noexcept { return *m_ctx; }

 private:
  friend class detail::file_open_awaitable;    // adopts the fd it opened
  friend class detail::file_status_awaitable;  // async_close takes the fd
  bool adopt(int fd) noexcept;
  int release_fd() noexcept;  // the number, no longer closed here; -1 without a file

  uring_context* m_ctx;
  detail::descriptor* m_desc = nullptr;
  std::uint64_t m_id = 0;
};

/// What read_file yields: the file's bytes, or the failure (with the bytes read so far).
struct read_file_result {
  std::error_code ec;
  std::string bytes;
};

/// Reads the whole file at `path`: `auto [ec, bytes] = co_await read_file(io, path)`.
/// Works for files whose size the kernel does not know in advance (/proc, pipes): it
/// reads until the end. Errors: the system's (open, read), file_too_large when it holds
/// more than `limit` bytes (then nothing more is read), not_enough_memory. From a weft
/// task.
task<read_file_result> read_file(uring_context& ctx, std::string path,
                                 std::size_t limit = std::numeric_limits<std::size_t>::max());

/// How write_file writes. A plain value.
struct write_file_options {
  int flags = O_WRONLY | O_CREAT | O_TRUNC;  ///< open(2)'s flags (O_APPEND to append, O_EXCL...)
  mode_t mode = 0644;                        ///< for a file it creates (less the umask)
  bool sync = false;                         ///< fdatasync before closing: on the device when it returns
};

/// Writes `bytes` to the file at `path` (made or truncated, as `o` says) and closes it,
/// reporting a failure of any step, close included: `if (auto ec = co_await
/// write_file(io, path, text))`. `bytes` must stay alive until it ends (a temporary in
/// the co_await's expression does). From a weft task.
task<std::error_code> write_file(uring_context& ctx, std::string path, std::string_view bytes,
                                 write_file_options o = {});

}  // namespace weft::io
