// nqueens: count the placements of n queens on an n x n board (bench/README.md);
// default n = 14. Each node is a board with `row` queens placed, one per row;
// it forks one child per column of the next row that no queen attacks, so up
// to n children. The board travels by value, as in the runtime-benchmarks suite.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <tbb/task_group.h>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/gs.hpp"

namespace {

using weft_bench::tbb_arena;

constexpr int k_max_n = 14;
using board = std::array<char, k_max_n>;  // board[r] = column of the queen in row r

constexpr std::array<std::uint64_t, k_max_n + 1> k_solutions = {1,  1,   0,   0,     2,      10,     4,      40,
                                                                92, 352, 724, 2'680, 14'200, 73'712, 365'596};

/// True when a queen at (row, col) is attacked by none of rows 0..row-1.
bool fits(const board& b, int row, int col) {
  for (int r = 0; r < row; ++r) {
    const int d = row - r;
    if (b[r] == col || b[r] == col - d || b[r] == col + d) return false;
  }
  return true;
}

int nqueens_seq(int n, int row, board b) {
  if (row == n) return 1;
  int total = 0;
  for (int col = 0; col < n; ++col) {
    if (!fits(b, row, col)) continue;
    b[row] = static_cast<char>(col);
    total += nqueens_seq(n, row + 1, b);
  }
  return total;
}

/// The columns of row `row` that fit, and how many there are.
[[gnu::noinline]] int fitting_columns(int n, int row, const board& b, std::array<char, k_max_n>& cols) {
  int k = 0;
  for (int col = 0; col < n; ++col) {
    if (fits(b, row, col)) cols[k++] = static_cast<char>(col);
  }
  return k;
}

int nqueens_tbb(int n, int row, board b) {
  if (row == n) return 1;
  std::array<char, k_max_n> cols;
  const int k = fitting_columns(n, row, b, cols);
  if (k == 0) return 0;
  std::array<int, k_max_n> parts;
  tbb::task_group g;
  for (int i = 0; i + 1 < k; ++i) {
    b[row] = cols[i];
    g.run([&parts, i, n, row, b] { parts[i] = nqueens_tbb(n, row + 1, b); });
  }
  b[row] = cols[k - 1];
  g.run_and_wait([&parts, k, n, row, b] { parts[k - 1] = nqueens_tbb(n, row + 1, b); });
  int total = 0;
  for (int i = 0; i < k; ++i) total += parts[i];
  return total;
}

int nqueens_omp(int n, int row, board b) {
  if (row == n) return 1;
  std::array<char, k_max_n> cols;
  const int k = fitting_columns(n, row, b, cols);
  if (k == 0) return 0;
  std::array<int, k_max_n> parts;
  for (int i = 0; i + 1 < k; ++i) {
    b[row] = cols[i];
#pragma omp task shared(parts) firstprivate(b)
    parts[i] = nqueens_omp(n, row + 1, b);
  }
  b[row] = cols[k - 1];
  parts[k - 1] = nqueens_omp(n, row + 1, b);
#pragma omp taskwait
  int total = 0;
  for (int i = 0; i < k; ++i) total += parts[i];
  return total;
}

weft::task<int> nqueens_fj(int n, int row, board b) {
  if (row == n) co_return 1;
  // The columns are checked first, as in the tbb and omp flavors: the check loop then
  // compiles as in plain code (interleaved with the forks, inside the coroutine body,
  // clang-19 keeps the board in the frame and `fits` costs more instructions).
  std::array<char, k_max_n> cols;
  const int k = fitting_columns(n, row, b, cols);
  // Up to n children, no heap: k - 1 queued in one push, the last run inline, one join
  // for all (weft/spawn_many.hpp). Each child gets its own copy of the board.
  int total = 0;
  for (int v : co_await weft::spawn_many<k_max_n>(static_cast<std::size_t>(k), [&](std::size_t i) {
         board child = b;
         child[row] = cols[i];
         return nqueens_fj(n, row + 1, child);
       }))
    total += v;
  co_return total;
}

/// gs: every valid board with the first k_gs_rows rows placed (fewer for small n) is
/// one item of a flat list; the group claims them, counts each with nqueens_seq and
/// sums with reduce. The nodes below the list are exactly nqueens_seq's.
constexpr int k_gs_rows = 3;

void nqueens_frontier(int n, int row, int rows, board b, std::vector<board>& out) {
  if (row == rows) {
    out.push_back(b);
    return;
  }
  for (int col = 0; col < n; ++col) {
    if (!fits(b, row, col)) continue;
    b[row] = static_cast<char>(col);
    nqueens_frontier(n, row + 1, rows, b, out);
  }
}

std::uint64_t nqueens_gs(int threads, std::uint64_t size) {
  const int n = static_cast<int>(size);
  const int rows = std::min(n, k_gs_rows);
  std::vector<board> items;
  nqueens_frontier(n, 0, rows, {}, items);
  return weft_bench::gs_sum(threads, items.size(), 1, [&items, n, rows](std::size_t i) -> std::uint64_t {
    return static_cast<std::uint64_t>(nqueens_seq(n, rows, items[i]));
  });
}

const weft_bench::workload<std::uint64_t> k_nqueens{
    .name = "nqueens",
    .size_meaning = "n, the board's side, 1..14",
    .default_size = 14,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= k_max_n; },
    .check = [](std::uint64_t n, const std::uint64_t& got) { return weft_bench::expect_equal(got, k_solutions[n]); },
    .flavors =
        {
            {"seq", [](int, std::uint64_t n) -> std::uint64_t { return nqueens_seq(int(n), 0, {}); }},
            {"fj",
             [](int t, std::uint64_t n) -> std::uint64_t {
               return weft::sync_wait(weft_bench::weft_pool(t), nqueens_fj(int(n), 0, {}));
             }},
            {"gs", nqueens_gs},
            {"tbb",
             [](int t, std::uint64_t n) -> std::uint64_t {
               int r = 0;
               tbb_arena(t).execute([&r, n] { r = nqueens_tbb(int(n), 0, {}); });
               return r;
             }},
            {"omp",
             [](int t, std::uint64_t n) -> std::uint64_t {
               return weft_bench::omp_root(t, [n] { return nqueens_omp(int(n), 0, {}); });
             }},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_nqueens); }
