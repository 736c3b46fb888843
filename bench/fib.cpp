// fib: recursive fork x2 (bench/README.md). Answer fib(n); default n = 39.
// Every flavor forks fib(n-1) and runs fib(n-2) inline, down to n < 2.
#include <cstdint>
#include <utility>
#include <vector>

#include <tbb/task_group.h>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/fib.hpp"
#include "common/gs.hpp"

namespace {

using weft_bench::fib_answer;
using weft_bench::fib_fj;

using weft_bench::tbb_arena;

std::uint64_t fib_seq(std::uint64_t n) {
  if (n < 2) return n;
  return fib_seq(n - 1) + fib_seq(n - 2);
}

std::uint64_t fib_tbb(std::uint64_t n) {
  if (n < 2) return n;
  std::uint64_t a = 0;
  tbb::task_group g;
  g.run([&a, n] { a = fib_tbb(n - 1); });
  std::uint64_t b = 0;
  g.run_and_wait([&b, n] { b = fib_tbb(n - 2); });
  return a + b;
}

std::uint64_t fib_omp(std::uint64_t n) {
  if (n < 2) return n;
  std::uint64_t a = 0;
#pragma omp task shared(a)
  a = fib_omp(n - 1);
  const std::uint64_t b = fib_omp(n - 2);
#pragma omp taskwait
  return a + b;
}

/// gs: the recursion's frontier at depth k_gs_depth (or its leaves above it) as a
/// flat list of subproblems n'; the group claims them one by one, runs fib_seq(n') on
/// each and sums with reduce. The calls are those of fib_seq(n), regrouped.
constexpr int k_gs_depth = 10;

void fib_frontier(std::uint64_t n, int depth, std::vector<std::uint64_t>& out) {
  if (depth == 0 || n < 2) {
    out.push_back(n);
    return;
  }
  fib_frontier(n - 1, depth - 1, out);
  fib_frontier(n - 2, depth - 1, out);
}

std::uint64_t fib_gs(int threads, std::uint64_t n) {
  std::vector<std::uint64_t> items;
  fib_frontier(n, k_gs_depth, items);
  return weft_bench::gs_sum(threads, items.size(), 1, [&items](std::size_t i) { return fib_seq(items[i]); });
}

const weft_bench::workload<std::uint64_t> k_fib{
    .name = "fib",
    .size_meaning = "n, computes fib(n); 1..90",
    .default_size = 39,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 90; },
    .check = [](std::uint64_t n, const std::uint64_t& got) { return weft_bench::expect_equal(got, fib_answer(n)); },
    .flavors =
        {
            {"seq", [](int, std::uint64_t n) { return fib_seq(n); }},
            {"fj", [](int t, std::uint64_t n) { return weft::sync_wait(weft_bench::weft_pool(t), fib_fj(n)); }},
            {"gs", fib_gs},
            {"tbb",
             [](int t, std::uint64_t n) {
               std::uint64_t r = 0;
               tbb_arena(t).execute([&r, n] { r = fib_tbb(n); });
               return r;
             }},
            {"omp", [](int t, std::uint64_t n) { return weft_bench::omp_root(t, [n] { return fib_omp(n); }); }},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_fib); }
