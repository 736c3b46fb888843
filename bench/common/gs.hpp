// bench/common/gs.hpp: what every `gs` (group-shared) flavor shares: one dispatch of a
// kernel on the bench's weft pool, waited for from the driver's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include <weft/group.hpp>
#include <weft/sync_wait.hpp>

#include "common/executors.hpp"

namespace weft_bench {

/// Runs `kernel` as one group of one member per worker of weft_pool(threads) over
/// the claim space [0, range), and returns once every member finished.
template <class Kernel>
void gs_dispatch(int threads, std::size_t range, Kernel kernel) {
  weft::thread_pool& pool = weft_pool(threads);
  weft::sync_wait(
      pool, [&]() -> weft::task<void> { co_await weft::dispatch(pool, {.members = 0, .range = range}, kernel); }());
}

/// The gs shape of a sum over [0, range): members claim `chunk` items at a time, add
/// `item(i)` for each, and combine their partial sums with reduce.
template <class Item>
std::uint64_t gs_sum(int threads, std::size_t range, std::size_t chunk, Item item) {
  std::uint64_t total = 0;
  gs_dispatch(threads, range, [&](weft::group& g) {
    std::uint64_t part = 0;
    for (auto r = g.claim(chunk); r; r = g.claim(chunk))
      for (std::size_t i : r) part += item(i);
    const std::uint64_t sum = g.reduce(part, std::plus<>{});
    if (g.index() == 0) total = sum;
  });
  return total;
}

}  // namespace weft_bench
