// weft/io/file.hpp: files on a uring_context and an io_pool: open errors, positional
// reads and writes (partial at the end, 0 bytes past it), read_all_at / write_all_at of
// megabytes, size, fsync, async_close, read_file / write_file (limits, /proc files, append,
// O_EXCL), many tasks reading one file at once, and a pipe's read ended by a deadline,
// a stop and close(); fds back to where they were.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::file;
using weft::io::io_result;
using weft_io_test::run;
using weft_io_test::temp_path;

namespace {

std::string pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) % 251);
  return s;
}

weft::task<std::string> positional(file& f, std::string path) {
  std::string log;
  if (auto ec = co_await f.open(path, O_RDWR | O_CREAT | O_TRUNC, 0600)) co_return "open: " + ec.message();
  auto w = co_await f.write_at("hello, world", 12, 0);
  log += "w" + std::to_string(w.n) + (w.ec ? w.ec.message() : "") + ";";
  auto w2 = co_await f.write_at("WORLD", 5, 7);
  log += "w" + std::to_string(w2.n) + ";";
  char buf[64] = {};
  auto r = co_await f.read_at(buf, sizeof buf, 0);
  log += std::string(buf, r.n) + ";";
  auto part = co_await f.read_at(buf, 10, 8);  // 4 bytes left at offset 8
  log += std::to_string(part.n) + (part.ec ? part.ec.message() : "") + ";";
  auto past = co_await f.read_at(buf, 10, 12);
  log += !past.ec && past.n == 0 ? "end;" : "not the end;";  // 0 bytes past the end, not an error
  auto sz = co_await f.size();
  log += "size " + std::to_string(sz.size) + ";";
  log += (co_await f.fsync()).ec ? "fsync failed;" : "fsync;";
  log += (co_await f.fdatasync()).ec ? "fdatasync failed;" : "fdatasync;";
  auto c = co_await f.async_close();
  log += c.ec ? "close: " + c.ec.message() : "closed";
  co_return log;
}

}  // namespace

TEST_CASE("file: open errors, positional reads and writes, size, fsync, async_close", "[io][file]") {
  const std::size_t fds = weft_io_test::fd_count();
  {
    auto ctx = weft_io_test::make_uring_or_skip();
    if (!ctx) return;
    auto pool = weft_io_test::make_io_pool_or_skip(2);
    if (!pool) return;
    for (weft::io::uring_context* io :
         {static_cast<weft::io::uring_context*>(ctx.get()), static_cast<weft::io::uring_context*>(pool.get())}) {
      temp_path t{"weft-file"};
      file f(*io);
      CHECK(weft::sync_wait(*io, positional(f, t.path)) == "w12;w5;hello, WORLD;4;end;size 12;fsync;fdatasync;closed");
      CHECK_FALSE(f.is_open());
      CHECK(f.native_handle() == -1);
      // Errors.
      CHECK(weft::sync_wait(*io, run(f.open(t.path + ".none"))) == std::errc::no_such_file_or_directory);
      CHECK(weft::sync_wait(*io, run(f.open(""))) == std::errc::invalid_argument);
      CHECK(weft::sync_wait(*io, run(f.open(std::string("a\0b", 3)))) == std::errc::invalid_argument);
      CHECK(weft::sync_wait(*io, run(f.open(t.path + "/x"))) == std::errc::not_a_directory);
      REQUIRE_FALSE(weft::sync_wait(*io, run(f.open(t.path))));
      CHECK(weft::sync_wait(*io, run(f.open(t.path))) == std::errc::device_or_resource_busy);
      char buf[4];
      CHECK(weft::sync_wait(*io, run(f.write_at("x", 1, 0))).ec == std::errc::bad_file_descriptor);  // O_RDONLY
      f.close();
      CHECK(weft::sync_wait(*io, run(f.read_at(buf, 4, 0))).ec == weft::io::error::cancelled);
      CHECK(weft::sync_wait(*io, run(f.size())).ec == std::errc::bad_file_descriptor);
      CHECK(weft::sync_wait(*io, run(f.async_close())).ec == std::errc::bad_file_descriptor);
      file never(*io);
      CHECK(weft::sync_wait(*io, run(never.read_at(buf, 4, 0))).ec == std::errc::bad_file_descriptor);
    }
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}

namespace {

weft::task<std::string> big_round(weft::io::uring_context& io, std::string path, std::size_t n) {
  const std::string data = pattern(n, 7);
  file f(io);
  if (auto ec = co_await f.open(path, O_RDWR | O_CREAT | O_TRUNC)) co_return "open: " + ec.message();
  auto w = co_await f.write_all_at(data.data(), data.size(), 100);
  if (w.ec || w.n != n) co_return "write_all_at: " + w.ec.message();
  std::string back(n + 50, '\0');
  auto r = co_await f.read_all_at(back.data(), back.size(), 100);  // 50 bytes more than there are
  if (r.ec) co_return "read_all_at: " + r.ec.message();            // a short count, not an error
  if (r.n != n) co_return "read_all_at: " + std::to_string(r.n);
  back.resize(r.n);
  if (back != data) co_return "read_all_at: wrong bytes";
  auto exact = co_await f.read_all_at(back.data(), 1000, 100 + n - 1000);
  if (exact.ec || exact.n != 1000 || back.compare(0, 1000, data, n - 1000, 1000) != 0) co_return "exact";
  // A hole: the first 100 bytes read back as zeros.
  char head[100];
  auto h = co_await f.read_all_at(head, sizeof head, 0);
  if (h.ec || h.n != 100 || std::string(head, 100) != std::string(100, '\0')) co_return "hole";
  co_return "ok";
}

// Many tasks read slices of one file at once, on any worker.
weft::task<bool> read_slice(file& f, const std::string& data, std::size_t at, std::size_t len) {
  std::string got(len, '\0');
  auto r = co_await f.read_all_at(got.data(), len, at);
  co_return !r.ec && r.n == len && got == data.substr(at, len);
}

weft::task<int> many_readers(weft::io::io_pool& io, file& f, const std::string& data) {
  weft::scope<bool> sc;
  for (std::size_t i = 0; i < 64; ++i) sc.spawn(read_slice(f, data, (i * 65'537) % (data.size() - 70'000), 70'000));
  int bad = 0;
  while (auto v = co_await sc.next())
    if (!*v) ++bad;
  co_await sc.join();
  (void)io;
  co_return bad;
}

}  // namespace

TEST_CASE("file: read_all_at and write_all_at of megabytes, and many readers at once", "[io][file]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  temp_path t{"weft-file"};
  CHECK(weft::sync_wait(*io, big_round(*io, t.path, 6 << 20)) == "ok");
  const std::string data = pattern(4 << 20, 3);
  std::ofstream(t.path, std::ios::binary | std::ios::trunc) << data;
  file f(*io);
  REQUIRE_FALSE(weft::sync_wait(*io, run(f.open(t.path))));
  CHECK(weft::sync_wait(*io, many_readers(*io, f, data)) == 0);
}

TEST_CASE("file: read_file and write_file", "[io][file]") {
  const std::size_t fds = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    temp_path t{"weft-file"};
    const std::string data = pattern(300'000, 1);
    CHECK_FALSE(weft::sync_wait(*io, weft::io::write_file(*io, t.path, data)));
    auto r = weft::sync_wait(*io, weft::io::read_file(*io, t.path));
    REQUIRE_FALSE(r.ec);
    CHECK(r.bytes == data);
    // Appending, and a limit.
    CHECK_FALSE(
        weft::sync_wait(*io, weft::io::write_file(*io, t.path, "tail", {.flags = O_WRONLY | O_APPEND, .sync = true})));
    r = weft::sync_wait(*io, weft::io::read_file(*io, t.path));
    CHECK(r.bytes == data + "tail");
    CHECK(weft::sync_wait(*io, weft::io::read_file(*io, t.path, data.size() + 4)).bytes.size() == data.size() + 4);
    const auto over = weft::sync_wait(*io, weft::io::read_file(*io, t.path, 1000));
    CHECK(over.ec == std::errc::file_too_large);
    // An empty file, and one whose size the kernel does not know in advance.
    CHECK_FALSE(weft::sync_wait(*io, weft::io::write_file(*io, t.path, "")));
    r = weft::sync_wait(*io, weft::io::read_file(*io, t.path));
    CHECK_FALSE(r.ec);
    CHECK(r.bytes.empty());
    r = weft::sync_wait(*io, weft::io::read_file(*io, "/proc/self/status"));
    CHECK_FALSE(r.ec);
    CHECK(r.bytes.find("Pid:") != std::string::npos);
    const auto small_proc = weft::sync_wait(*io, weft::io::read_file(*io, "/proc/self/status", 10));
    CHECK(small_proc.ec == std::errc::file_too_large);
    // Errors.
    CHECK(weft::sync_wait(*io, weft::io::read_file(*io, t.path + ".none")).ec == std::errc::no_such_file_or_directory);
    CHECK(weft::sync_wait(*io, weft::io::write_file(*io, t.path, "x", {.flags = O_WRONLY | O_CREAT | O_EXCL})) ==
          std::errc::file_exists);
    CHECK(weft::sync_wait(*io, weft::io::write_file(*io, "/proc/self/no-such-dir/x", "x")) ==
          std::errc::no_such_file_or_directory);
    CHECK(weft::sync_wait(*io, weft::io::read_file(*io, "/")).ec == std::errc::is_a_directory);
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}

namespace {
weft::task<io_result> read_pipe(file& f, char* buf, std::size_t len) { co_return co_await f.read_some(buf, len); }
}  // namespace

TEST_CASE("file: a pipe's read ended by a deadline, a stop and close(); data through it", "[io][file]") {
  const std::size_t fds = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    file r(*io, p[0]), w(*io, p[1]);
    char buf[16];
    const auto timed = weft::sync_wait(*io, [&]() -> weft::task<io_result> {
      co_return co_await weft::io::with_timeout(r.read_some(buf, sizeof buf), 20ms);
    }());
    CHECK(timed.ec == weft::io::error::timed_out);
    CHECK(weft::sync_wait(*io, weft::with_timeout(read_pipe(r, buf, sizeof buf), 20ms)).ec == std::errc::timed_out);
    const auto stopped = weft::sync_wait(*io, [&]() -> weft::task<std::error_code> {
      weft::scope<io_result> sc;
      sc.spawn(read_pipe(r, buf, sizeof buf));
      co_await weft::io::sleep_for(*io, 10ms);
      sc.request_stop();
      auto v = co_await sc.next();
      co_await sc.join();
      co_return v ? v->ec : std::error_code{};
    }());
    CHECK(stopped == std::errc::operation_canceled);
    // Data still flows after all that.
    CHECK(weft::sync_wait(*io, run(w.write_all("pipe", 4))).n == 4);
    const auto got = weft::sync_wait(*io, read_pipe(r, buf, sizeof buf));
    CHECK(std::string(buf, got.n) == "pipe");
    std::thread closer([&] {
      std::this_thread::sleep_for(20ms);
      r.close();
    });
    CHECK(weft::sync_wait(*io, read_pipe(r, buf, sizeof buf)).ec == weft::io::error::cancelled);
    closer.join();
    // The stream form's end: error::eof once the writer's end is closed.
    {
      int q[2];
      REQUIRE(::pipe2(q, O_CLOEXEC) == 0);
      file qr(*io, q[0]);
      ::close(q[1]);
      CHECK(weft::sync_wait(*io, read_pipe(qr, buf, sizeof buf)).ec == weft::io::error::eof);
    }
    // The writer's end: the reader is gone. write(2) to such a pipe raises SIGPIPE, as the
    // header says; a service ignores it.
    std::signal(SIGPIPE, SIG_IGN);
    CHECK(weft::sync_wait(*io, run(w.write_some("x", 1))).ec == std::errc::broken_pipe);
  }
  CHECK(weft_io_test::settled_fd_count(fds) == fds);
}
