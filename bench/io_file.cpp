// io_file: random 4 KiB reads of a 64 MiB file in the page cache (bench/README.md): the
// cost of one file read through each runtime, with the disk out of the picture. --size
// reads in all (default 200,000), at offsets of a fixed pseudo-random sequence; each
// 4 KiB block of the file begins with its own index, so every read is checked (the
// answer is the number of reads that returned the block they asked for: --size).
// --threads is ignored: one thread does the reads.
//
// Flavors: seq (pread(2) in a loop: the floor, no runtime), weft-uring (weft::io::file
// read_at from a task on a weft::io::uring_context, one read at a time), weft-uring-16
// (16 tasks on that context, 16 reads in flight), asio (plain Asio C++20 coroutines,
// asio::random_access_file over Asio's io_uring backend, one read at a time), asio-16
// (16 coroutines).
#include <fcntl.h>
#include <unistd.h>
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <weft/io/file.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/weft.hpp>

#include "common/driver.hpp"

namespace {

constexpr std::size_t k_block = 4096;
constexpr std::uint64_t k_blocks = (64u << 20) / k_block;
constexpr int k_depth = 16;

// The file: made once per process, removed at exit.
struct data_file {
  std::string path;
  data_file() {
    const char* dir = std::getenv("TMPDIR");
    path = std::string(dir != nullptr ? dir : "/tmp") + "/weft-bench-io-file-" + std::to_string(::getpid());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::system_category(), "io_file: cannot make " + path);
    std::vector<char> block(k_block);
    for (std::uint64_t b = 0; b < k_blocks; ++b) {
      for (std::size_t i = 0; i < k_block; ++i) block[i] = static_cast<char>((b + i) & 0xff);
      std::memcpy(block.data(), &b, sizeof b);
      if (::write(fd, block.data(), k_block) != static_cast<ssize_t>(k_block)) {
        ::close(fd);
        throw std::runtime_error("io_file: cannot write " + path);
      }
    }
    ::close(fd);
  }
  ~data_file() { std::filesystem::remove(path); }
};

const data_file& the_file() {
  static const data_file f;
  return f;
}

// The i-th read's block of reader `r`: a fixed pseudo-random walk over the blocks.
std::uint64_t block_of(std::uint64_t r, std::uint64_t i) {
  std::uint64_t x = (r + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return x % k_blocks;
}

bool right_block(const char* buf, std::size_t n, std::uint64_t b) {
  std::uint64_t got = 0;
  if (n != k_block) return false;
  std::memcpy(&got, buf, sizeof got);
  return got == b && buf[k_block - 1] == static_cast<char>((b + k_block - 1) & 0xff);
}

std::uint64_t share(std::uint64_t total, int readers, int r) {
  return total / readers + (static_cast<std::uint64_t>(r) < total % readers ? 1 : 0);
}

// ---- seq: pread ------------------------------------------------------------------------------

std::uint64_t run_seq(int, std::uint64_t total) {
  const int fd = ::open(the_file().path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::system_category(), "open");
  alignas(64) char buf[k_block];
  std::uint64_t ok = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::uint64_t b = block_of(0, i);
    const ssize_t n = ::pread(fd, buf, k_block, static_cast<off_t>(b * k_block));
    if (n > 0 && right_block(buf, static_cast<std::size_t>(n), b)) ++ok;
  }
  ::close(fd);
  return ok;
}

// ---- weft-uring ------------------------------------------------------------------------------

weft::task<std::uint64_t> weft_reader(weft::io::file& f, int r, std::uint64_t count) {
  alignas(64) char buf[k_block];
  std::uint64_t ok = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t b = block_of(static_cast<std::uint64_t>(r), i);
    auto [ec, n] = co_await f.read_at(buf, k_block, b * k_block);
    if (!ec && right_block(buf, n, b)) ++ok;
  }
  co_return ok;
}

weft::task<std::uint64_t> weft_readers(weft::io::uring_context& io, int readers, std::uint64_t total) {
  weft::io::file f(io);
  if (auto ec = co_await f.open(the_file().path)) throw std::system_error(ec, "open");
  std::vector<weft::task<std::uint64_t>> ts;
  for (int r = 0; r < readers; ++r) ts.push_back(weft_reader(f, r, share(total, readers, r)));
  std::uint64_t ok = 0;
  for (std::uint64_t n : co_await weft::spawn_many(std::move(ts))) ok += n;
  co_return ok;
}

std::uint64_t run_weft(int readers, std::uint64_t total) {
  static weft::io::uring_context io;  // throws uring_unavailable where io_uring is blocked
  return weft::sync_wait(io, weft_readers(io, readers, total));
}

std::uint64_t run_weft_1(int, std::uint64_t total) { return run_weft(1, total); }
std::uint64_t run_weft_16(int, std::uint64_t total) { return run_weft(k_depth, total); }

// ---- asio: random_access_file over Asio's io_uring backend -----------------------------------------

constexpr auto k_as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

asio::awaitable<void> asio_reader(asio::random_access_file& f, int r, std::uint64_t count, std::uint64_t& ok) {
  alignas(64) char buf[k_block];
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t b = block_of(static_cast<std::uint64_t>(r), i);
    auto [ec, n] = co_await f.async_read_some_at(b * k_block, asio::buffer(buf), k_as_tuple);
    if (!ec && right_block(buf, n, b)) ++ok;
  }
}

std::uint64_t run_asio(int readers, std::uint64_t total) {
  asio::io_context io(1);
  asio::random_access_file f(io, the_file().path, asio::file_base::read_only);
  std::uint64_t ok = 0;
  for (int r = 0; r < readers; ++r) asio::co_spawn(io, asio_reader(f, r, share(total, readers, r), ok), asio::detached);
  io.run();
  return ok;
}

std::uint64_t run_asio_1(int, std::uint64_t total) { return run_asio(1, total); }
std::uint64_t run_asio_16(int, std::uint64_t total) { return run_asio(k_depth, total); }

const weft_bench::workload<std::uint64_t> k_io_file{
    .name = "io_file",
    .size_meaning = "random 4 KiB reads of a 64 MiB file in the page cache",
    .default_size = 200'000,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 1'000'000'000; },
    .check = [](std::uint64_t n, const std::uint64_t& ok) { return weft_bench::expect_equal(ok, n); },
    .flavors =
        {
            {"seq", run_seq},
            {"weft-uring", run_weft_1},
            {"weft-uring-16", run_weft_16},
            {"asio", run_asio_1},
            {"asio-16", run_asio_16},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_io_file); }
