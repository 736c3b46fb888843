// io/src/file.cpp: weft::io::file and read_file / write_file (weft/io/file.hpp): each
// operation one SQE prepared by its awaitable (op_kind::prepared) on the loop thread.
#include "weft/io/file.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <utility>

#include "uring_impl.hpp"
#include "weft/io/error.hpp"

namespace weft::io {

namespace detail {

namespace {

std::uint32_t clamp(std::size_t len) noexcept {
  return static_cast<std::uint32_t>(std::min<std::size_t>(len, std::size_t{1} << 30));
}

std::error_code failure_of(const uring_op& op) noexcept {
  if (op.m_res == -ECANCELED && op.m_timed_out) return make_error_code(error::timed_out);
  if (op.m_res == -ECANCELED) return make_error_code(error::cancelled);
  return {-op.m_res, std::system_category()};
}

}  // namespace

// ---- open ---------------------------------------------------------------------------------

file_open_awaitable::file_open_awaitable(uring_context& ctx, file& f, std::string path, int flags, mode_t mode) noexcept
    : uring_awaitable(ctx), m_file(&f), m_path(std::move(path)), m_flags(flags | O_CLOEXEC), m_mode(mode) {
  if (m_path.empty() || m_path.find('\0') != std::string::npos) {
    m_early = std::make_error_code(std::errc::invalid_argument);
  } else if (f.is_open()) {
    m_early = std::make_error_code(std::errc::device_or_resource_busy);
  }
  m_op.m_kind = op_kind::prepared;
  m_op.m_prep = &prep;
}

file_open_awaitable::file_open_awaitable(file_open_awaitable&& o) noexcept
    : uring_awaitable(std::move(o)),
      m_file(o.m_file),
      m_path(std::move(o.m_path)),
      m_flags(o.m_flags),
      m_mode(o.m_mode),
      m_early(o.m_early) {}

void file_open_awaitable::prep(::io_uring_sqe* sqe, uring_op& op) {
  auto* self = static_cast<file_open_awaitable*>(op.m_arg);
  io_uring_prep_openat(sqe, AT_FDCWD, self->m_path.c_str(), self->m_flags, self->m_mode);
}

std::error_code file_open_awaitable::await_resume() const noexcept {
  if (m_early) return m_early;
  if (m_op.m_res < 0) return failure_of(m_op);
  if (!m_file->adopt(m_op.m_res)) return std::make_error_code(std::errc::not_enough_memory);  // closed it
  return {};
}

// ---- reads and writes -----------------------------------------------------------------------

file_transfer_awaitable::file_transfer_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, bool write,
                                                 bool all, void* buf, std::size_t len, std::uint64_t offset) noexcept
    : socket_awaitable(ctx, d), m_write(write), m_all(all), m_total(len), m_offset(offset) {
  m_op.m_kind = op_kind::prepared;
  m_op.m_prep = &prep;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = id;
  m_op.m_buf = buf;
  m_op.m_len = clamp(len);
  if (all) m_op.m_on_cqe = &on_cqe;
}

void file_transfer_awaitable::prep(::io_uring_sqe* sqe, uring_op& op) {
  auto* self = static_cast<file_transfer_awaitable*>(op.m_arg);
  // -1 as the offset: the file position (and a pipe or terminal, which has none).
  const __u64 at = self->m_offset == file::k_position ? static_cast<__u64>(-1) : self->m_offset + self->m_done;
  if (self->m_write) {
    io_uring_prep_write(sqe, op.m_fd, op.m_buf, op.m_len, at);
  } else {
    io_uring_prep_read(sqe, op.m_fd, op.m_buf, op.m_len, at);
  }
}

bool file_transfer_awaitable::on_cqe(uring_op& op, int res, unsigned) {
  auto* self = static_cast<file_transfer_awaitable*>(op.m_arg);
  if (res <= 0) return true;  // the end of the file, or a failure
  self->m_done += static_cast<std::size_t>(res);
  if (self->m_done >= self->m_total) return true;
  if (op.m_watch != nullptr && op.m_watch->m_fired.load(std::memory_order_acquire)) {
    self->m_stopped = true;  // a stop requested meanwhile: end here (as write_all)
    return true;
  }
  op.m_buf = static_cast<char*>(op.m_buf) + res;
  op.m_len = clamp(self->m_total - self->m_done);
  uring_impl::current()->prepare(op, false);  // on the loop thread: the rest
  return false;
}

io_result file_transfer_awaitable::await_resume() const noexcept {
  if (!m_all) {
    if (m_desc.closed() && m_op.m_res <= 0 && !m_op.m_timed_out) return {make_error_code(error::cancelled), 0};
    if (m_op.m_res < 0) return {failure_of(m_op), 0};
    // The end of the file: a positional read yields 0 bytes (as pread), the stream form
    // (at the file position: read_some) error::eof, as every weft stream.
    if (m_op.m_res == 0 && !m_write && m_total > 0 && m_offset == file::k_position)
      return {make_error_code(error::eof), 0};
    return {{}, static_cast<std::size_t>(m_op.m_res)};
  }
  if (m_done >= m_total) return {{}, m_done};
  if (m_stopped) return {make_error_code(error::cancelled), m_done};
  if (m_desc.closed() && m_op.m_res <= 0) return {make_error_code(error::cancelled), m_done};
  if (m_op.m_res < 0) return {failure_of(m_op), m_done};
  // A read of 0: the end of the file, a short count (no error); a write of 0 (a full
  // device says ENOSPC instead).
  if (!m_write) return {{}, m_done};
  return {std::make_error_code(std::errc::no_space_on_device), m_done};
}

// ---- fsync, size, close -----------------------------------------------------------------------

file_status_awaitable::file_status_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id, what w,
                                             std::error_code early, file* closing) noexcept
    : socket_awaitable(ctx, d), m_what(w), m_early(early), m_closing(closing) {
  m_op.m_kind = op_kind::prepared;
  m_op.m_prep = &prep;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = id;
}

bool file_status_awaitable::take_fd() noexcept {
  const int fd = m_closing->release_fd();
  if (fd < 0) {
    m_op.m_res = -EBADF;
    return false;
  }
  m_op.m_fd = fd;
  m_op.m_socket = 0;  // no identity: the number is closed by this very operation
  return true;
}

void file_status_awaitable::prep(::io_uring_sqe* sqe, uring_op& op) {
  auto* self = static_cast<file_status_awaitable*>(op.m_arg);
  switch (self->m_what) {
    case what::fsync:
      io_uring_prep_fsync(sqe, op.m_fd, 0);
      break;
    case what::fdatasync:
      io_uring_prep_fsync(sqe, op.m_fd, IORING_FSYNC_DATASYNC);
      break;
    case what::size:
      io_uring_prep_statx(sqe, op.m_fd, "", AT_EMPTY_PATH, STATX_SIZE, &self->m_stx);
      break;
    case what::close:
      io_uring_prep_close(sqe, op.m_fd);
      break;
  }
}

size_result file_status_awaitable::await_resume() const noexcept {
  if (m_early) return {m_early, 0};
  if (m_op.m_res < 0) {
    if (m_what != what::close && m_desc.closed() && !m_op.m_timed_out) return {make_error_code(error::cancelled), 0};
    return {failure_of(m_op), 0};
  }
  if (m_what == what::size) return {{}, m_stx.stx_size};
  return {};
}

}  // namespace detail

// ---- file -------------------------------------------------------------------------------------

file::file(uring_context& ctx, int fd) noexcept : m_ctx(&ctx) {
  if (fd >= 0) adopt(fd);
}

file::file(file&& o) noexcept
    : m_ctx(o.m_ctx), m_desc(std::exchange(o.m_desc, nullptr)), m_id(std::exchange(o.m_id, 0)) {}

file::~file() {
  close();
  if (m_desc != nullptr) m_desc->drop_ref();
}

bool file::adopt(int fd) noexcept {
  detail::descriptor* const d = detail::descriptor::make(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  if (m_desc != nullptr) m_desc->drop_ref();  // a closed one: nothing of it is open
  m_desc = d;
  m_id = detail::new_socket_id();
  return true;
}

int file::release_fd() noexcept {
  if (!is_open()) return -1;
  const int fd = m_desc->fd();
  m_desc->release();
  return fd;
}

detail::file_open_awaitable file::open(std::string path, int flags, mode_t mode) noexcept {
  return {*m_ctx, *this, std::move(path), flags, mode};
}

namespace {
std::error_code no_file(const file& f) noexcept {
  return f.is_open() ? std::error_code{} : std::make_error_code(std::errc::bad_file_descriptor);
}
}  // namespace

detail::file_status_awaitable file::fsync() noexcept {
  return {*m_ctx, m_desc, m_id, detail::file_status_awaitable::what::fsync, no_file(*this)};
}

detail::file_status_awaitable file::fdatasync() noexcept {
  return {*m_ctx, m_desc, m_id, detail::file_status_awaitable::what::fdatasync, no_file(*this)};
}

detail::file_status_awaitable file::size() noexcept {
  return {*m_ctx, m_desc, m_id, detail::file_status_awaitable::what::size, no_file(*this)};
}

detail::file_status_awaitable file::async_close() noexcept {
  return {*m_ctx, nullptr, 0, detail::file_status_awaitable::what::close, {}, this};
}

void file::close() noexcept { detail::close_and_cancel(*m_ctx, m_desc, m_id); }

// ---- read_file / write_file -------------------------------------------------------------------

task<read_file_result> read_file(uring_context& ctx, std::string path, std::size_t limit) {
  read_file_result r;
  file f(ctx);
  if ((r.ec = co_await f.open(std::move(path), O_RDONLY))) co_return r;
  const size_result sz = co_await f.size();
  if (sz.ec) {
    r.ec = sz.ec;
    co_return r;
  }
  if (sz.size > limit) {
    r.ec = std::make_error_code(std::errc::file_too_large);
    co_return r;
  }
  // Room for the size statx saw plus one byte, to see the end at once; a file that grew
  // meanwhile, or one whose size the kernel does not know (/proc, a pipe), grows the
  // buffer by doubling. Never more than limit + 1 bytes: one byte past the limit says
  // the file is too large.
  const auto bounded = [limit](std::size_t want) {
    return limit == std::numeric_limits<std::size_t>::max() ? want : std::min(want, limit + 1);
  };
  std::size_t have = 0;
  try {
    r.bytes.resize(bounded(std::max<std::size_t>(static_cast<std::size_t>(sz.size) + 1, 4096)));
    for (;;) {
      if (have == r.bytes.size()) {
        if (have > limit) break;
        r.bytes.resize(bounded(have * 2));
      }
      auto [ec, n] = co_await f.read_at(r.bytes.data() + have, r.bytes.size() - have, have);
      if (ec) {
        r.ec = ec;
        break;
      }
      if (n == 0) break;  // the end
      have += n;
    }
  } catch (const std::bad_alloc&) {
    r.ec = std::make_error_code(std::errc::not_enough_memory);
  }
  if (!r.ec && have > limit) {
    have = limit;
    r.ec = std::make_error_code(std::errc::file_too_large);
  }
  r.bytes.resize(std::min(have, r.bytes.size()));
  co_return r;
}

task<std::error_code> write_file(uring_context& ctx, std::string path, std::string_view bytes, write_file_options o) {
  file f(ctx);
  if (auto ec = co_await f.open(std::move(path), o.flags, o.mode)) co_return ec;
  const bool append = (o.flags & O_APPEND) != 0;
  auto [ec, n] = append ? co_await f.write_all(bytes.data(), bytes.size())
                        : co_await f.write_all_at(bytes.data(), bytes.size(), 0);
  if (ec) co_return ec;  // f's destructor closes it
  if (o.sync) {
    if (auto s = co_await f.fdatasync(); s.ec) co_return s.ec;
  }
  co_return (co_await f.async_close()).ec;
}

}  // namespace weft::io
