// channel: MPMC throughput (bench/README.md). P producers push the elements 0..N-1 (each a
// contiguous share), C consumers pull until the channel is closed and drained; the
// channel is closed once every producer finished. P = C = max(1, threads / 2).
// Answer: the sum of everything pulled, checked together with the count.
//
// Flavors:
//   mt          weft::channel (unbounded) on a weft::thread_pool of `threads` workers
//   mt-bounded  the same with a bounded channel of capacity 1024
//   asio        peer: asio::experimental::concurrent_channel (capacity 1024) with Asio
//               C++20 coroutines on an asio::thread_pool of `threads` threads. Asio
//               1.22's close() drops what is still buffered, so "close" is one end
//               marker per consumer (an error code) sent after the producers finished.
//   st          the `mt` code (weft::channel, unbounded) on weft::io::asio_executor: one
//               thread running an asio::io_context; P = C = 1 whatever --threads says
//   st-bounded  the same with capacity 1024
#include <algorithm>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <weft/channel.hpp>
#include <weft/io/asio_executor.hpp>

#include "common/driver.hpp"
#include "common/executors.hpp"

namespace {

constexpr std::size_t k_bounded_capacity = 1024;

/// What the consumers pulled, all together.
struct tally {
  std::uint64_t count = 0;
  std::uint64_t sum = 0;
};

std::uint64_t sides(int threads) { return static_cast<std::uint64_t>(std::max(1, threads / 2)); }

/// Producer i of p pushes [base(i), base(i + 1)).
std::uint64_t share_begin(std::uint64_t n, std::uint64_t p, std::uint64_t i) { return n / p * i + std::min(i, n % p); }

// ---- weft -------------------------------------------------------------------------

using weft_channel = weft::channel<std::uint64_t>;

weft::task<void> weft_producer(weft_channel& ch, std::uint64_t first, std::uint64_t last) {
  for (std::uint64_t v = first; v < last; ++v)
    if (!co_await ch.push(v)) throw std::logic_error("push into a channel closed too early");
}

weft::task<tally> weft_consumer(weft_channel& ch) {
  tally t;
  while (auto v = co_await ch.pull()) {
    ++t.count;
    t.sum += *v;
  }
  co_return t;
}

weft::task<tally> weft_root(std::uint64_t n, int threads, std::size_t capacity) {
  weft_channel ch{capacity};
  const std::uint64_t c = sides(threads), p = sides(threads);
  weft::fork_group<tally> consumers;
  for (std::uint64_t i = 0; i < c; ++i) consumers.fork(weft_consumer(ch));
  std::vector<weft::task<void>> producers;
  for (std::uint64_t i = 0; i < p; ++i)
    producers.push_back(weft_producer(ch, share_begin(n, p, i), share_begin(n, p, i + 1)));
  co_await weft::spawn_many(std::move(producers));
  ch.close();
  tally total;
  for (const tally& t : co_await consumers.join()) {
    total.count += t.count;
    total.sum += t.sum;
  }
  co_return total;
}

tally run_weft(int threads, std::uint64_t n, std::size_t capacity) {
  return weft::sync_wait(weft_bench::weft_pool(threads), weft_root(n, threads, capacity));
}

// The single-thread configuration: the same tasks on weft's Asio executor (one thread
// running one io_context), built once per process like the pool.
tally run_weft_st(std::uint64_t n, std::size_t capacity) {
  static weft::io::asio_executor ex;
  return weft::sync_wait(ex, weft_root(n, 1, capacity));
}

// ---- asio (peer) ------------------------------------------------------------------

using asio_channel = asio::experimental::concurrent_channel<void(asio::error_code, std::uint64_t)>;

asio::thread_pool& asio_pool(int threads) {
  static asio::thread_pool pool{static_cast<std::size_t>(threads)};
  static const int first = threads;
  weft_bench::check_same_threads(first, threads);
  return pool;
}

asio::awaitable<void> asio_producer(asio_channel& ch, std::uint64_t first, std::uint64_t last) {
  for (std::uint64_t v = first; v < last; ++v) co_await ch.async_send(asio::error_code{}, v, asio::use_awaitable);
}

asio::awaitable<void> asio_send_ends(asio_channel& ch, std::uint64_t consumers) {
  for (std::uint64_t i = 0; i < consumers; ++i)
    co_await ch.async_send(asio::error::eof, std::uint64_t{0}, asio::use_awaitable);
}

asio::awaitable<tally> asio_consumer(asio_channel& ch) {
  tally t;
  for (;;) {
    auto [ec, v] = co_await ch.async_receive(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) break;
    ++t.count;
    t.sum += v;
  }
  co_return t;
}

tally run_asio(int threads, std::uint64_t n) {
  asio::thread_pool& pool = asio_pool(threads);
  asio_channel ch{pool.get_executor(), k_bounded_capacity};
  const std::uint64_t c = sides(threads), p = sides(threads);
  std::vector<std::future<tally>> consumers;
  for (std::uint64_t i = 0; i < c; ++i) consumers.push_back(asio::co_spawn(pool, asio_consumer(ch), asio::use_future));
  std::vector<std::future<void>> producers;
  for (std::uint64_t i = 0; i < p; ++i)
    producers.push_back(
        asio::co_spawn(pool, asio_producer(ch, share_begin(n, p, i), share_begin(n, p, i + 1)), asio::use_future));
  for (auto& f : producers) f.get();
  asio::co_spawn(pool, asio_send_ends(ch, c), asio::use_future).get();
  tally total;
  for (auto& f : consumers) {
    const tally t = f.get();
    total.count += t.count;
    total.sum += t.sum;
  }
  return total;
}

const weft_bench::workload<tally> k_channel{
    .name = "channel",
    .size_meaning = "elements pushed through the channel; >= 1",
    .default_size = 10'000'000,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= (std::uint64_t{1} << 32); },
    .check =
        [](std::uint64_t n, const tally& got) {
          if (got.count != n)
            return weft_bench::verdict{
                false, 0, "pulled " + std::to_string(got.count) + " elements, expected " + std::to_string(n)};
          return weft_bench::expect_equal(got.sum, n * (n - 1) / 2);
        },
    .flavors =
        {
            {"mt", [](int t, std::uint64_t n) { return run_weft(t, n, weft_channel::unbounded); }},
            {"mt-bounded", [](int t, std::uint64_t n) { return run_weft(t, n, k_bounded_capacity); }},
            {"st", [](int, std::uint64_t n) { return run_weft_st(n, weft_channel::unbounded); }},
            {"st-bounded", [](int, std::uint64_t n) { return run_weft_st(n, k_bounded_capacity); }},
            {"asio", run_asio},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_channel); }
