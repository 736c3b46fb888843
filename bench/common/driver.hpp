// bench/common/driver.hpp: the one command line, output writer and verifier
// that every bench binary shares (CONTRIBUTING.md, 'One benchmark driver'). A workload is a table of
// flavors, and a flavor is a plain function `Answer run(threads, size)`.
//
//   bench/<binary> [--flavor F] [--threads T] [--size N] [--runs R] [--list]
//
// The driver runs the chosen flavor once untimed (warm-up, so that executors
// and allocators are warm, as in the runtime-benchmarks suite), then R timed
// runs, checks every answer, and prints the report format of bench/README.md. A wrong answer
// prints `FAIL: <what>` and exits 1; a bad command line prints the usage and
// exits 2.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft_bench {

/// What a workload's verifier says about one answer.
struct verdict {
  bool ok = true;
  std::uint64_t output = 0;  ///< printed as `output:` when ok
  std::string what;          ///< why the answer is wrong, when !ok
};

/// The verdict for a scalar answer that must equal `expected`.
verdict expect_equal(std::uint64_t got, std::uint64_t expected);

template <class Answer>
struct flavor {
  std::string_view name;
  /// Does the whole workload once on `threads` threads; returns its answer.
  Answer (*run)(int threads, std::uint64_t size);
};

template <class Answer>
struct workload {
  std::string_view name;          ///< the binary's name
  std::string_view size_meaning;  ///< one line for the usage: what --size is
  std::uint64_t default_size;
  bool (*size_ok)(std::uint64_t size);
  verdict (*check)(std::uint64_t size, const Answer& answer);
  std::vector<flavor<Answer>> flavors;
};

/// The parsed command line.
struct options {
  std::size_t flavor = 0;  ///< index into the workload's flavors
  int threads = 1;
  std::uint64_t size = 0;
  int runs = 1;
};

/// The facts parse_command_line needs about a workload, whatever its Answer.
struct workload_info {
  std::string_view name;
  std::string_view size_meaning;
  std::uint64_t default_size;
  bool (*size_ok)(std::uint64_t size);
  std::vector<std::string_view> flavors;
};

struct run_record {
  std::int64_t duration_us;
  long max_rss_kib;
};

/// Parses argv; on --help or --list prints and exits 0, on an error prints
/// the usage to stderr and exits 2.
options parse_command_line(int argc, char** argv, const workload_info& info);

/// Peak resident set of this process so far, from getrusage(RUSAGE_SELF).
long max_rss_kib();

/// Prints `FAIL: <what>` and returns the exit status 1.
int fail(std::string_view what);

/// Counters of the pool a flavor runs on (weft's flavors: bench/common/executors.hpp
/// sets it when it makes the pool): work items stolen and parks so far. Empty for the
/// other flavors.
struct pool_counters {
  std::uint64_t stolen = 0;
  std::uint64_t parks = 0;
};
inline pool_counters (*g_pool_counters)() = nullptr;

/// After a run of `seconds` whose pool counters went from `before` to `after`: prints
/// `pool: steals_per_s=.. parks_per_s=..` (a metrics line, bench/README.md).
void print_pool_rates(const pool_counters& before, const pool_counters& after, double seconds);

/// Prints the report (bench/README.md): threads, one block per run, output.
void print_report(const options& opt, const std::vector<run_record>& runs, std::uint64_t output);

/// The whole program of one bench binary.
template <class Answer>
int run(int argc, char** argv, const workload<Answer>& w) {
  workload_info info{w.name, w.size_meaning, w.default_size, w.size_ok, {}};
  for (const auto& f : w.flavors) info.flavors.push_back(f.name);
  const options opt = parse_command_line(argc, argv, info);
  const auto fn = w.flavors[opt.flavor].run;

  const auto warm_start = std::chrono::steady_clock::now();
  verdict v = w.check(opt.size, fn(opt.threads, opt.size));  // warm-up, untimed
  if (!v.ok) return fail("warm-up: " + v.what);
  pool_counters before{};  // the pool was made during the warm-up: its counters start there
  if (g_pool_counters != nullptr) {
    const pool_counters after = g_pool_counters();
    print_pool_rates(before, after,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count());
    before = after;
  }

  std::vector<run_record> runs;
  for (int i = 0; i < opt.runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Answer answer = fn(opt.threads, opt.size);
    const auto stop = std::chrono::steady_clock::now();
    v = w.check(opt.size, answer);
    if (!v.ok) return fail("run " + std::to_string(i + 1) + ": " + v.what);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(stop - start);
    runs.push_back({static_cast<std::int64_t>(us.count()), max_rss_kib()});
    if (g_pool_counters != nullptr) {
      const pool_counters after = g_pool_counters();
      print_pool_rates(before, after, std::chrono::duration<double>(stop - start).count());
      before = after;
    }
  }
  print_report(opt, runs, v.output);
  return 0;
}

}  // namespace weft_bench
