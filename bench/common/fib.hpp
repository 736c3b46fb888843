// bench/common/fib.hpp: the fork-join fib every fib-shaped benchmark runs (fib,
// fiber_switch's fib-fj, priority's low-priority load), and its closed-form answer.
#pragma once

#include <cstdint>
#include <utility>

#include <weft/spawn.hpp>
#include <weft/task.hpp>

namespace weft_bench {

/// fib(n) with a fork per call: forks fib(n-1), runs fib(n-2) inline, joins. A function
/// object, made through weft::spawn(fn, args...): clang then inlines each child's frame
/// set-up into the parent (see weft/spawn.hpp), which clang-19 does not do for a
/// coroutine that calls itself by name.
struct fib_fn {
  weft::task<std::uint64_t> operator()(std::uint64_t n) const;
};
inline constexpr fib_fn fib_fj{};

inline weft::task<std::uint64_t> fib_fn::operator()(std::uint64_t n) const {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib_fj, n - 1).fork();
  const std::uint64_t b = co_await weft::spawn(fib_fj, n - 2);
  co_return b + co_await a;
}

/// fib(n) by iteration: what every fib flavor must answer.
inline std::uint64_t fib_answer(std::uint64_t n) {
  std::uint64_t a = 0, b = 1;
  for (std::uint64_t i = 0; i < n; ++i) b = std::exchange(a, b) + b;
  return a;
}

}  // namespace weft_bench
