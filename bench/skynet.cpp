// skynet: fork x10 down to the leaves (bench/README.md); leaf i returns i, every node
// sums its 10 children. --size is the number of leaves, a power of 10 (default
// 10^8, depth 8); the answer is the sum 0 + 1 + ... + (leaves - 1).
// A node is (first leaf number under it, number of leaves under it).
#include <array>
#include <cstdint>
#include <numeric>

#include <tbb/task_group.h>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/gs.hpp"

namespace {

using weft_bench::tbb_arena;

constexpr int k_fanout = 10;

std::uint64_t sum(const std::array<std::uint64_t, k_fanout>& parts) {
  return std::accumulate(parts.begin(), parts.end(), std::uint64_t{0});
}

std::uint64_t skynet_seq(std::uint64_t first, std::uint64_t leaves) {
  if (leaves == 1) return first;
  const std::uint64_t step = leaves / k_fanout;
  std::uint64_t total = 0;
  for (int i = 0; i < k_fanout; ++i) total += skynet_seq(first + i * step, step);
  return total;
}

std::uint64_t skynet_tbb(std::uint64_t first, std::uint64_t leaves) {
  if (leaves == 1) return first;
  const std::uint64_t step = leaves / k_fanout;
  std::array<std::uint64_t, k_fanout> parts;
  tbb::task_group g;
  for (int i = 0; i < k_fanout - 1; ++i) {
    g.run([&parts, i, first, step] { parts[i] = skynet_tbb(first + i * step, step); });
  }
  g.run_and_wait([&parts, first, step] { parts[k_fanout - 1] = skynet_tbb(first + (k_fanout - 1) * step, step); });
  return sum(parts);
}

std::uint64_t skynet_omp(std::uint64_t first, std::uint64_t leaves) {
  if (leaves == 1) return first;
  const std::uint64_t step = leaves / k_fanout;
  std::array<std::uint64_t, k_fanout> parts;
  for (int i = 0; i < k_fanout - 1; ++i) {
#pragma omp task shared(parts)
    parts[i] = skynet_omp(first + i * step, step);
  }
  parts[k_fanout - 1] = skynet_omp(first + (k_fanout - 1) * step, step);
#pragma omp taskwait
  return sum(parts);
}

weft::task<std::uint64_t> skynet_fj(std::uint64_t first, std::uint64_t leaves) {
  if (leaves == 1) co_return first;
  const std::uint64_t step = leaves / k_fanout;
  // The generator form: clang inlines each child's frame set-up (weft/spawn_many.hpp).
  co_return sum(co_await weft::spawn_many<k_fanout>([=](std::size_t i) { return skynet_fj(first + i * step, step); }));
}

/// gs: the nodes k_gs_levels levels down (10^k of them, or the leaves) are a flat
/// index space; the group claims them, runs skynet_seq on each and sums with reduce.
constexpr int k_gs_levels = 3;

std::uint64_t skynet_gs(int threads, std::uint64_t leaves) {
  std::uint64_t nodes = 1;
  for (int l = 0; l < k_gs_levels && nodes < leaves; ++l) nodes *= k_fanout;
  const std::uint64_t step = leaves / nodes;
  return weft_bench::gs_sum(threads, nodes, 1, [step](std::size_t i) { return skynet_seq(i * step, step); });
}

bool power_of_ten(std::uint64_t n) {
  while (n >= k_fanout && n % k_fanout == 0) n /= k_fanout;
  return n == 1;
}

const weft_bench::workload<std::uint64_t> k_skynet{
    .name = "skynet",
    .size_meaning = "number of leaves, a power of 10 from 10 to 10^10",
    .default_size = 100'000'000,
    .size_ok = [](std::uint64_t n) { return n >= 10 && n <= 10'000'000'000 && power_of_ten(n); },
    .check = [](std::uint64_t leaves,
                const std::uint64_t& got) { return weft_bench::expect_equal(got, leaves * (leaves - 1) / 2); },
    .flavors =
        {
            {"seq", [](int, std::uint64_t n) { return skynet_seq(0, n); }},
            {"fj", [](int t, std::uint64_t n) { return weft::sync_wait(weft_bench::weft_pool(t), skynet_fj(0, n)); }},
            {"gs", skynet_gs},
            {"tbb",
             [](int t, std::uint64_t n) {
               std::uint64_t r = 0;
               tbb_arena(t).execute([&r, n] { r = skynet_tbb(0, n); });
               return r;
             }},
            {"omp", [](int t, std::uint64_t n) { return weft_bench::omp_root(t, [n] { return skynet_omp(0, n); }); }},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_skynet); }
