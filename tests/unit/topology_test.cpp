// src/topology.cpp on machines unlike the one at hand: the default thread count under a
// CPU affinity mask and under cgroup quotas (v2 nested, v1), topologies with many cores,
// SMT or none at all (hwloc's synthetic topologies), and the pool on each.
//
// The cases that need a fresh process (the topology and the default thread count are
// loaded once per process) re-run this executable on one hidden test case, with the
// environment or affinity mask under test, and check its exit status.
#include <weft/pool.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "pool_impl.hpp"  // src/: weft::detail::cgroup_cpu_quota, physical_core_count

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// A fake cgroup file system under a fresh temporary directory.
struct fake_cgroup_fs {
  fs::path root;
  fake_cgroup_fs() {
    root = fs::temp_directory_path() /
           ("weft-cgroup-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~fake_cgroup_fs() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  fake_cgroup_fs(const fake_cgroup_fs&) = delete;
  fake_cgroup_fs& operator=(const fake_cgroup_fs&) = delete;
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = root / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::size_t quota(const std::string& self) const { return weft::detail::cgroup_cpu_quota(root.string(), self); }
};

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  auto b = co_await fib(n - 2);
  co_return co_await a + b;
}

/// Runs this executable on the hidden test case `name` in a child process, with
/// `env` set (NAME=VALUE each) and, if `cpus` is not empty, that affinity mask; its
/// exit status (0: every assertion held).
int run_child(const std::string& name, const std::vector<std::string>& env, const std::vector<int>& cpus = {}) {
  // Everything the child needs is made before fork(): between fork and exec it makes
  // only system calls (other threads of this process may hold the allocator's locks).
  std::vector<std::string> strings(env);
  for (char** e = environ; *e != nullptr; ++e) strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& kv : strings) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string arg0 = "topology_test", arg1 = name;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!cpus.empty() && ::sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(90);
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(91);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/// The CPUs of this process's affinity mask.
std::vector<int> my_cpus() {
  cpu_set_t set;
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

/// What every child checks: a sane default, and pools (default, larger than the machine,
/// pinned) that run fork-join work to the right answer and stop.
void check_pools_work() {
  const std::size_t n = weft::default_thread_count();
  INFO("default_thread_count() = " << n);
  CHECK(n >= 1);
  {
    weft::thread_pool pool;
    CHECK(pool.thread_count() == n);
    CHECK(weft::sync_wait(pool, fib(22)) == 17711);
  }
  for (bool pin : {false, true}) {
    weft::thread_pool pool{{.threads = 9, .pin = pin}};
    CHECK(weft::sync_wait(pool, fib(22)) == 17711);
  }
}

}  // namespace

TEST_CASE("cgroup v2: the tightest cpu.max of the process's cgroup and its ancestors", "[topology]") {
  fake_cgroup_fs cg;
  cg.write("cpu.max", "max 100000\n");
  cg.write("a/cpu.max", "max 100000\n");
  cg.write("a/b/cpu.max", "150000 100000\n");
  CHECK(cg.quota("0::/a/b\n") == 2);   // 1.5 CPUs, rounded up
  CHECK(cg.quota("0::/a/b/\n") == 2);  // a trailing slash
  CHECK(cg.quota("0::/a\n") == 0);     // "max" all the way up: no quota
  cg.write("a/cpu.max", "100000 100000\n");
  CHECK(cg.quota("0::/a/b\n") == 1);    // the parent's is tighter
  CHECK(cg.quota("0::/a/b/c\n") == 1);  // a cgroup without a cpu.max of its own
  cg.write("cpu.max", "400000 100000\n");
  CHECK(cg.quota("0::/\n") == 4);           // the root, as a container with its own namespace sees it
  CHECK(cg.quota("0::/elsewhere\n") == 4);  // a path this mount lacks: its root still counts
}

TEST_CASE("cgroup v1: the cpu controller's CFS quota", "[topology]") {
  fake_cgroup_fs cg;
  cg.write("cpu/docker/x/cpu.cfs_quota_us", "300000\n");
  cg.write("cpu/docker/x/cpu.cfs_period_us", "100000\n");
  CHECK(cg.quota("5:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n") == 3);
  cg.write("cpu/docker/x/cpu.cfs_quota_us", "-1\n");  // unlimited
  CHECK(cg.quota("4:cpu,cpuacct:/docker/x\n") == 0);
  CHECK(cg.quota("4:cpuacct:/docker/x\n") == 0);  // cpuacct is not cpu
}

TEST_CASE("cgroup quota: missing and malformed files count as no quota", "[topology]") {
  fake_cgroup_fs cg;
  CHECK(cg.quota("") == 0);
  CHECK(cg.quota("0::/a\n") == 0);
  CHECK(cg.quota("garbage without colons\n") == 0);
  cg.write("a/cpu.max", "lots 100000\n");
  CHECK(cg.quota("0::/a\n") == 0);
  cg.write("a/cpu.max", "100000 0\n");
  CHECK(cg.quota("0::/a\n") == 0);
  cg.write("a/cpu.max", "-5 100000\n");
  CHECK(cg.quota("0::/a\n") == 0);
  CHECK(cg.quota("0::a-relative-path\n") == 0);
}

TEST_CASE("default thread count: the cores of the affinity mask, not of the machine", "[topology]") {
  const std::vector<int> cpus = my_cpus();
  CHECK(weft::detail::physical_core_count() <= cpus.size());
  // One CPU of those this process may use: the child's default is one worker.
  CHECK(run_child("child: one CPU", {}, {cpus.front()}) == 0);
}

TEST_CASE("topologies unlike this machine: many cores with SMT, one core, none", "[topology]") {
  // hwloc's synthetic topologies (HWLOC_SYNTHETIC): 2 packages of 8 cores with 2 PUs
  // each, and one core. Then hwloc without its Linux and x86 discovery (PUs but no core
  // objects, as in some containers), and with no usable discovery component at all (the
  // load fails): the affinity mask alone counts.
  // A synthetic topology numbers its PUs 0, 1, ... in order: PU p of "core:8 pu:2" is on
  // core p / 2. The cores expected are those holding a CPU of our mask (none: the mask).
  const std::vector<int> cpus = my_cpus();
  std::set<int> smt_cores;
  for (int c : cpus)
    if (c < 32) smt_cores.insert(c / 2);
  const std::size_t smt = smt_cores.empty() ? cpus.size() : smt_cores.size();
  const std::size_t one = cpus.front() == 0 ? 1 : cpus.size();
  CHECK(run_child("child: pools work",
                  {"HWLOC_SYNTHETIC=pack:2 core:8 pu:2", "WEFT_TEST_CORES=" + std::to_string(smt)}) == 0);
  CHECK(run_child("child: pools work",
                  {"HWLOC_SYNTHETIC=pack:1 core:1 pu:1", "WEFT_TEST_CORES=" + std::to_string(one)}) == 0);
  CHECK(run_child("child: no topology", {"HWLOC_COMPONENTS=-linux,-x86"}) == 0);
  CHECK(run_child("child: no topology", {"HWLOC_COMPONENTS=weft-no-such-component,stop"}) == 0);
}

// ---- the children (hidden: run only by name, from the cases above) -------------------

TEST_CASE("child: one CPU", "[.][topology-child]") {
  CHECK(my_cpus().size() == 1);
  CHECK(weft::detail::physical_core_count() == 1);
  CHECK(weft::default_thread_count() == 1);
  check_pools_work();
}

TEST_CASE("child: pools work", "[.][topology-child]") {
  const char* expected = std::getenv("WEFT_TEST_CORES");
  REQUIRE(expected != nullptr);
  CHECK(weft::detail::physical_core_count() == std::stoul(expected));
  check_pools_work();
}

TEST_CASE("child: no topology", "[.][topology-child]") {
  CHECK(weft::detail::physical_core_count() == my_cpus().size());
  check_pools_work();
}
