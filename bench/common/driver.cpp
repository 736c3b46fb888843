// bench/common/driver.cpp: the non-template half of driver.hpp.
#include "driver.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

namespace weft_bench {
namespace {

// bench/README.md: the default flavor is fj; a binary built without weft has none,
// then its first flavor is the default.
std::size_t default_flavor(const workload_info& info) {
  for (std::size_t k = 0; k < info.flavors.size(); ++k) {
    if (info.flavors[k] == "fj") return k;
  }
  return 0;
}

void print_usage(std::FILE* out, const workload_info& info) {
  const auto default_name = info.flavors[default_flavor(info)];
  std::fprintf(out,
               "usage: %.*s [--flavor F] [--threads T] [--size N] [--runs R] [--list]\n"
               "  --flavor F   one of:",
               static_cast<int>(info.name.size()), info.name.data());
  for (const auto f : info.flavors) std::fprintf(out, " %.*s", static_cast<int>(f.size()), f.data());
  std::fprintf(out,
               " (default %.*s)\n"
               "  --threads T  worker threads, >= 1 (default: hardware threads, %u)\n"
               "  --size N     %.*s (default %llu)\n"
               "  --runs R     timed runs after one untimed warm-up, >= 1 (default 1)\n"
               "  --list       print the flavors, one a line, and exit\n",
               static_cast<int>(default_name.size()), default_name.data(),
               std::max(1u, std::thread::hardware_concurrency()), static_cast<int>(info.size_meaning.size()),
               info.size_meaning.data(), static_cast<unsigned long long>(info.default_size));
}

[[noreturn]] void usage_error(const workload_info& info, const std::string& what) {
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(info.name.size()), info.name.data(), what.c_str());
  print_usage(stderr, info);
  std::exit(2);
}

std::optional<std::uint64_t> parse_number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

verdict expect_equal(std::uint64_t got, std::uint64_t expected) {
  if (got == expected) return {true, got, {}};
  return {false, got, "got " + std::to_string(got) + ", expected " + std::to_string(expected)};
}

options parse_command_line(int argc, char** argv, const workload_info& info) {
  options opt;
  opt.flavor = default_flavor(info);
  opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opt.size = info.default_size;

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout, info);
      std::exit(0);
    }
    if (arg == "--list") {
      for (const auto f : info.flavors) std::printf("%.*s\n", static_cast<int>(f.size()), f.data());
      std::exit(0);
    }
    // Both `--opt value` and `--opt=value`.
    std::string_view value;
    const auto eq = arg.find('=');
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg != "--flavor" && arg != "--threads" && arg != "--size" && arg != "--runs") {
      usage_error(info, "unknown option '" + std::string(arg) + "'");
    }
    if (eq == std::string_view::npos) {
      if (i + 1 == argc) usage_error(info, "missing value for " + std::string(arg));
      value = argv[++i];
    }

    if (arg == "--flavor") {
      std::size_t k = 0;
      while (k < info.flavors.size() && info.flavors[k] != value) ++k;
      if (k == info.flavors.size()) usage_error(info, "unknown flavor '" + std::string(value) + "'");
      opt.flavor = k;
      continue;
    }
    const auto number = parse_number(value);
    if (!number) usage_error(info, "not a number: " + std::string(arg) + " " + std::string(value));
    if (arg == "--threads" && *number >= 1 && *number <= 4096) {
      opt.threads = static_cast<int>(*number);
    } else if (arg == "--runs" && *number >= 1 && *number <= 1000) {
      opt.runs = static_cast<int>(*number);
    } else if (arg == "--size" && info.size_ok(*number)) {
      opt.size = *number;
    } else {
      usage_error(info, "value out of range: " + std::string(arg) + " " + std::string(value));
    }
  }
  return opt;
}

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

int fail(std::string_view what) {
  std::printf("FAIL: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stdout);
  return 1;
}

void print_pool_rates(const pool_counters& before, const pool_counters& after, double seconds) {
  if (seconds <= 0) seconds = 1e-9;
  std::printf("pool: steals_per_s=%.0f parks_per_s=%.0f\n", static_cast<double>(after.stolen - before.stolen) / seconds,
              static_cast<double>(after.parks - before.parks) / seconds);
}

void print_report(const options& opt, const std::vector<run_record>& runs, std::uint64_t output) {
  std::printf("threads: %d\nruns:\n", opt.threads);
  for (const auto& r : runs) {
    std::printf(
        "  - iteration_count: 1\n"
        "    duration: %lld us\n"
        "    max_rss: %ld KiB\n",
        static_cast<long long>(r.duration_us), r.max_rss_kib);
  }
  std::printf("output: %llu\n", static_cast<unsigned long long>(output));
  std::fflush(stdout);
}

}  // namespace weft_bench
