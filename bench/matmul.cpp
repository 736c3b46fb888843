// matmul: C += A * B for N x N int matrices, A and B all ones, so every C[i][j]
// must end as N (bench/README.md); default N = 2048, a power of 2. The multiply is
// recursive over quadrants: a block of side n <= 32 is a plain triple loop
// (multiply_block, one non-coroutine function that every flavor calls); a
// larger one does its 8 half-size products in two phases of 4, each phase
// writing the 4 disjoint quarters of C, so the 4 of a phase may run in parallel.
// As in the runtime-benchmarks suite, a timed run includes allocating and
// filling the matrices.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include <tbb/task_group.h>

#include "common/driver.hpp"
#include "common/executors.hpp"
#include "common/gs.hpp"

namespace {

using weft_bench::tbb_arena;

constexpr int k_base = 32;

/// C += A * B for the n x n blocks at a, b, c of matrices whose rows are
/// `stride` ints apart. Never inlined: every flavor runs the same machine code.
[[gnu::noinline]] void multiply_block(const int* a, const int* b, int* c, int n, int stride) {
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      for (int j = 0; j < n; ++j) c[i * stride + j] += a[i * stride + k] * b[k * stride + j];
    }
  }
}

/// One block product: C block += A block * B block, all of side n.
struct product {
  const int* a;
  const int* b;
  int* c;
  int n;
  int stride;
};

/// Phase k (0 or 1) of the 8 half-size products of `p`: 4 products whose C
/// quarters are disjoint. Phase k does C_ij += A_ik * B_kj for i, j in {0, 1}.
std::array<product, 4> phase(const product& p, int k) {
  const int h = p.n / 2;
  const int s = p.stride;
  const auto at = [s, h](auto* m, int row, int col) { return m + row * h * s + col * h; };
  std::array<product, 4> products;
  for (int q = 0; q < 4; ++q) {
    const int i = q / 2, j = q % 2;
    products[q] = {at(p.a, i, k), at(p.b, k, j), at(p.c, i, j), h, s};
  }
  return products;
}

void matmul_seq(const product& p) {
  if (p.n <= k_base) return multiply_block(p.a, p.b, p.c, p.n, p.stride);
  for (int k = 0; k < 2; ++k) {
    for (const product& q : phase(p, k)) matmul_seq(q);
  }
}

void matmul_tbb(const product& p) {
  if (p.n <= k_base) return multiply_block(p.a, p.b, p.c, p.n, p.stride);
  for (int k = 0; k < 2; ++k) {
    const auto qs = phase(p, k);
    tbb::task_group g;  // 3, 2, 1 queued, 0 run here: seq's order on one thread (see matmul_fj)
    for (int q = 3; q > 0; --q) g.run([&qs, q] { matmul_tbb(qs[q]); });
    g.run_and_wait([&qs] { matmul_tbb(qs[0]); });
  }
}

void matmul_omp(const product& p) {
  if (p.n <= k_base) return multiply_block(p.a, p.b, p.c, p.n, p.stride);
  for (int k = 0; k < 2; ++k) {
    const auto qs = phase(p, k);
    for (int q = 3; q > 0; --q) {  // as matmul_tbb
#pragma omp task shared(qs)
      matmul_omp(qs[q]);
    }
    matmul_omp(qs[0]);
#pragma omp taskwait
  }
}

weft::task<void> matmul_fj(product p) {
  if (p.n <= k_base) {
    multiply_block(p.a, p.b, p.c, p.n, p.stride);
    co_return;
  }
  for (int k = 0; k < 2; ++k) {
    const auto qs = phase(p, k);
    // Forked last to first, so that the inline child is quarter 0 and the joins (newest
    // first) run 1, 2, 3: on one thread the products come in seq's order, ascending in
    // memory. In the opposite order (fork 0, 1, 2, run 3, join 2, 1, 0) every level
    // walks its quarters downwards, which is measurably slower (bench/README.md).
    auto h3 = weft::spawn(matmul_fj(qs[3])).fork();
    auto h2 = weft::spawn(matmul_fj(qs[2])).fork();
    auto h1 = weft::spawn(matmul_fj(qs[1])).fork();
    co_await matmul_fj(qs[0]);
    co_await h1;
    co_await h2;
    co_await h3;
  }
}

/// gs: the recursion's phases flattened. With blocks of side b (k_gs_levels halvings
/// below n, at least k_base), the product is n/b phases; phase k does, for every C
/// block (i, j), C_ij += A_ik * B_kj, so the blocks of a phase are independent and are
/// claimed one by one, and a barrier (next_phase) separates phases, which write the
/// same C blocks. Each block product is matmul_seq (the same multiply_block calls as
/// seq, in the same order within a block), and the phases come in the order the
/// recursion's own two-phase levels put them.
constexpr int k_gs_levels = 2;

void matmul_gs(int threads, const product& p) {
  int b = p.n;
  for (int l = 0; l < k_gs_levels && b / 2 >= k_base; ++l) b /= 2;
  const int per_side = p.n / b;
  const std::size_t blocks = static_cast<std::size_t>(per_side) * per_side;
  const int s = p.stride;
  weft_bench::gs_dispatch(threads, blocks, [&](weft::group& g) {
    for (int k = 0; k < per_side; ++k) {
      if (k != 0) g.next_phase(blocks);
      for (auto r = g.claim(1); r; r = g.claim(1)) {
        for (std::size_t t : r) {
          const int i = static_cast<int>(t) / per_side, j = static_cast<int>(t) % per_side;
          matmul_seq({p.a + i * b * s + k * b, p.b + k * b * s + j * b, p.c + i * b * s + j * b, b, s});
        }
      }
    }
  });
}

/// An n x n int matrix in its own anonymous mapping (huge pages advised). malloc would serve a run's
/// matrices from fresh pages or from reused heap depending on its history (its
/// mmap threshold moves), so one flavor paid ~190 page faults a run at N = 256 and
/// another none, and heap placement changed the layout modulo 4 KiB. A mapping of
/// its own gives every flavor and every run the same page-aligned layout and the
/// same first-touch cost.
class matrix {
 public:
  matrix(std::size_t n, int value) : m_bytes(std::max<std::size_t>(1, n * n * sizeof(int))) {
    void* p = mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    // Transparent huge pages where the kernel offers them (enabled=madvise here):
    // 2 MiB pages cut the first-touch faults of the fill, which is sequential and
    // timed, from 4096 to 8 per matrix, and the TLB misses of the column walks.
    // Same for every flavor, seq included.
    (void)madvise(p, m_bytes, MADV_HUGEPAGE);
    m_cells = static_cast<int*>(p);
    std::fill_n(m_cells, n * n, value);
  }
  matrix(matrix&& o) noexcept : m_bytes(o.m_bytes), m_cells(std::exchange(o.m_cells, nullptr)) {}
  matrix& operator=(matrix&&) = delete;
  ~matrix() {
    if (m_cells) munmap(m_cells, m_bytes);
  }
  int* data() const { return m_cells; }

 private:
  std::size_t m_bytes;
  int* m_cells = nullptr;
};

/// Allocates A and B (ones) and C (zeros), calls multiply(whole product), returns C.
template <class Multiply>
matrix multiply_ones(std::uint64_t size, Multiply multiply) {
  const int n = static_cast<int>(size);
  const matrix a(size, 1);
  const matrix b(size, 1);
  matrix c(size, 0);
  multiply(product{a.data(), b.data(), c.data(), n, n});
  return c;
}

weft_bench::verdict check(std::uint64_t size, const matrix& c) {
  const auto n = static_cast<std::int64_t>(size);
  for (std::size_t k = 0; k < size * size; ++k) {
    if (c.data()[k] != n) {
      return {false, 0,
              "C[" + std::to_string(k / size) + "][" + std::to_string(k % size) + "] = " + std::to_string(c.data()[k]) +
                  ", expected " + std::to_string(n)};
    }
  }
  return {true, size, {}};  // output: the value every cell holds
}

const weft_bench::workload<matrix> k_matmul{
    .name = "matmul",
    .size_meaning = "N, the matrices' side, a power of 2 from 1 to 8192",
    .default_size = 2048,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 8192 && (n & (n - 1)) == 0; },
    .check = check,
    .flavors =
        {
            {"seq", [](int, std::uint64_t n) { return multiply_ones(n, matmul_seq); }},
            {"fj",
             [](int t, std::uint64_t n) {
               return multiply_ones(n,
                                    [t](const product& p) { weft::sync_wait(weft_bench::weft_pool(t), matmul_fj(p)); });
             }},
            {"gs", [](int t, std::uint64_t n) { return multiply_ones(n, [t](const product& p) { matmul_gs(t, p); }); }},
            {"tbb",
             [](int t, std::uint64_t n) {
               return multiply_ones(n, [t](const product& p) { tbb_arena(t).execute([&p] { matmul_tbb(p); }); });
             }},
            {"omp",
             [](int t, std::uint64_t n) {
               return multiply_ones(n, [t](const product& p) { weft_bench::omp_root(t, [&p] { matmul_omp(p); }); });
             }},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_matmul); }
