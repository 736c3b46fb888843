// io_file_seq: a page-cached file read in 64 KiB blocks, 32 reads in flight
// (bench/README.md): the throughput of file reads through each runtime, with the disk
// out of the picture. --size MiB read in all (default 4096: four passes over the file);
// the file is 1 GiB (or --size MiB when smaller), made once per process and removed at
// exit. Each 64 KiB block begins with its own index, so every read is checked: the
// answer is the number of blocks that came back right (--size * 16).
//
// Flavors, on --threads T: seq (T threads, each a pread(2) loop over its share of the
// blocks: the floor, no runtime), weft (an io_pool of T workers, 32 tasks reading
// through one weft::io::file with read_all_at), weft-uring (one uring_context, 32 tasks;
// T ignored), asio (an io_context run by T threads, 32 coroutines on one
// asio::random_access_file over Asio's io_uring backend).
#include <fcntl.h>
#include <unistd.h>
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <weft/io/file.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/weft.hpp>

#include "common/driver.hpp"

namespace {

constexpr std::size_t k_block = 64 * 1024;
constexpr int k_depth = 32;

struct data_file {
  std::string path;
  std::uint64_t blocks = 0;
  explicit data_file(std::uint64_t mib) : blocks(mib * (1024 * 1024 / k_block)) {
    const char* dir = std::getenv("TMPDIR");
    path = std::string(dir != nullptr ? dir : "/tmp") + "/weft-bench-io-file-seq-" + std::to_string(::getpid());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::system_category(), "io_file_seq: cannot make " + path);
    std::vector<char> block(k_block);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      block[k_block - 1] = static_cast<char>(b & 0xff);
      std::memcpy(block.data(), &b, sizeof b);
      if (::write(fd, block.data(), k_block) != static_cast<ssize_t>(k_block)) {
        ::close(fd);
        throw std::runtime_error("io_file_seq: cannot write " + path);
      }
    }
    ::close(fd);
  }
  ~data_file() { std::filesystem::remove(path); }
};

// The file, made at the first run with the size that run asks for (the driver runs one
// size per process).
const data_file& the_file(std::uint64_t total_mib) {
  static const data_file f(std::min<std::uint64_t>(total_mib, 1024));
  return f;
}

bool right_block(const char* buf, std::size_t n, std::uint64_t b) {
  std::uint64_t got = 0;
  if (n != k_block) return false;
  std::memcpy(&got, buf, sizeof got);
  return got == b && buf[k_block - 1] == static_cast<char>(b & 0xff);
}

// Read number i (0 .. total blocks) reads block i % blocks of the file.
struct plan {
  std::uint64_t reads;
  std::uint64_t blocks;
};

plan plan_for(std::uint64_t size_mib) {
  const data_file& f = the_file(size_mib);
  return {size_mib * (1024 * 1024 / k_block), f.blocks};
}

// ---- seq: pread on T threads ---------------------------------------------------------------------

std::uint64_t run_seq(int threads, std::uint64_t size) {
  const plan p = plan_for(size);
  const int fd = ::open(the_file(size).path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::system_category(), "open");
  std::atomic<std::uint64_t> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<char> buf(k_block);
      std::uint64_t mine = 0;
      for (std::uint64_t i = static_cast<std::uint64_t>(t); i < p.reads; i += static_cast<std::uint64_t>(threads)) {
        const std::uint64_t b = i % p.blocks;
        const ssize_t n = ::pread(fd, buf.data(), k_block, static_cast<off_t>(b * k_block));
        if (n > 0 && right_block(buf.data(), static_cast<std::size_t>(n), b)) ++mine;
      }
      ok.fetch_add(mine);
    });
  }
  for (auto& t : ts) t.join();
  ::close(fd);
  return ok.load();
}

// ---- weft: 32 tasks through one file ------------------------------------------------------------

weft::task<std::uint64_t> weft_reader(weft::io::file& f, plan p, int r) {
  std::vector<char> buf(k_block);
  std::uint64_t ok = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(r); i < p.reads; i += k_depth) {
    const std::uint64_t b = i % p.blocks;
    auto [ec, n] = co_await f.read_all_at(buf.data(), k_block, b * k_block);
    if (!ec && right_block(buf.data(), n, b)) ++ok;
  }
  co_return ok;
}

weft::task<std::uint64_t> weft_readers(weft::io::uring_context& io, std::uint64_t size) {
  const plan p = plan_for(size);
  weft::io::file f(io);
  if (auto ec = co_await f.open(the_file(size).path)) throw std::system_error(ec, "open");
  std::vector<weft::task<std::uint64_t>> ts;
  for (int r = 0; r < k_depth; ++r) ts.push_back(weft_reader(f, p, r));
  std::uint64_t ok = 0;
  for (std::uint64_t n : co_await weft::spawn_many(std::move(ts))) ok += n;
  co_return ok;
}

std::uint64_t run_weft(int threads, std::uint64_t size) {
  static weft::io::io_pool io{{.threads = static_cast<std::size_t>(threads)}};
  return weft::sync_wait(io, weft_readers(io, size));
}

std::uint64_t run_weft_uring(int, std::uint64_t size) {
  static weft::io::uring_context io;
  return weft::sync_wait(io, weft_readers(io, size));
}

// ---- asio: random_access_file over Asio's io_uring backend ----------------------------------------

constexpr auto k_as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

asio::awaitable<void> asio_reader(asio::random_access_file& f, plan p, int r, std::atomic<std::uint64_t>& ok) {
  std::vector<char> buf(k_block);
  std::uint64_t mine = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(r); i < p.reads; i += k_depth) {
    const std::uint64_t b = i % p.blocks;
    auto [ec, n] = co_await asio::async_read_at(f, b * k_block, asio::buffer(buf), k_as_tuple);
    if (!ec && right_block(buf.data(), n, b)) ++mine;
  }
  ok.fetch_add(mine);
}

std::uint64_t run_asio(int threads, std::uint64_t size) {
  const plan p = plan_for(size);
  asio::io_context io(threads);
  asio::random_access_file f(io, the_file(size).path, asio::file_base::read_only);
  std::atomic<std::uint64_t> ok{0};
  for (int r = 0; r < k_depth; ++r) asio::co_spawn(io, asio_reader(f, p, r, ok), asio::detached);
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) ts.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : ts) t.join();
  return ok.load();
}

const weft_bench::workload<std::uint64_t> k_io_file_seq{
    .name = "io_file_seq",
    .size_meaning = "MiB read in 64 KiB blocks (32 in flight) from a cached file of min(size, 1024) MiB",
    .default_size = 4096,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 1'000'000; },
    .check = [](std::uint64_t n,
                const std::uint64_t& ok) { return weft_bench::expect_equal(ok, n * (1024 * 1024 / k_block)); },
    .flavors =
        {
            {"seq", run_seq},
            {"weft", run_weft},
            {"weft-uring", run_weft_uring},
            {"asio", run_asio},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_io_file_seq); }
