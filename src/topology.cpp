// src/topology.cpp: hardware topology (hwloc): default thread count, steal order,
// pinning.
//
// Worker i is associated with core i mod cores (in hwloc's logical order). Its steal
// order lists the other workers by decreasing depth of the deepest hwloc object their
// cores share (same L2, then same L3, then same package, ...), ties broken by distance
// in worker index so that workers do not all hit the same victim first.
#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>

#include "pool_impl.hpp"

namespace weft::detail {

namespace {

/// The process-wide hwloc topology, loaded once.
class topology {
 public:
  static topology& get() {
    static topology t;
    return t;
  }
  hwloc_topology_t handle() const noexcept { return m_topo; }
  bool ok() const noexcept { return m_ok; }
  int cores() const noexcept {
    if (!m_ok) return 0;
    return hwloc_get_nbobjs_by_type(m_topo, HWLOC_OBJ_CORE);
  }
  hwloc_obj_t core(unsigned i) const noexcept {
    const int n = cores();
    if (n <= 0) return nullptr;
    return hwloc_get_obj_by_type(m_topo, HWLOC_OBJ_CORE, i % static_cast<unsigned>(n));
  }

 private:
  topology() {
    // Debian's hwloc dlopens plugins (libxml2 with ICU, OpenCL, GL, PCI) that weft
    // does not need; they cost ~2 MiB of RSS, over half of an idle pool's footprint.
    // Keep them out unless the user configured hwloc's plugins, and leave the
    // environment as it was.
    const bool set_here = std::getenv("HWLOC_PLUGINS_BLACKLIST") == nullptr;
    if (set_here) setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_xml_libxml,hwloc_opencl,hwloc_gl,hwloc_pci", 0);
    const int rc = hwloc_topology_init(&m_topo);
    if (set_here) unsetenv("HWLOC_PLUGINS_BLACKLIST");
    if (rc != 0) {
      m_topo = nullptr;
      return;
    }
    m_ok = hwloc_topology_load(m_topo) == 0;
  }
  ~topology() {
    if (m_topo) hwloc_topology_destroy(m_topo);
  }
  hwloc_topology_t m_topo = nullptr;
  bool m_ok = false;
};

/// The CPUs of this process's affinity mask (at least 1).
std::size_t affinity_cpu_count() noexcept {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
  return 1;
}

/// The whole file's first line, or "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

/// CPUs a quota of `quota` per `period` gives, rounded up; 0 for none or nonsense.
std::size_t quota_cpus(double quota, double period) noexcept {
  if (!(quota > 0) || !(period > 0)) return 0;
  return static_cast<std::size_t>(std::ceil(quota / period));
}

/// The smaller of two quotas, where 0 means none.
std::size_t tighter(std::size_t a, std::size_t b) noexcept { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

}  // namespace

std::size_t cgroup_cpu_quota(const std::string& fs_root, const std::string& self_cgroup) noexcept {
  try {
    // cgroup v2: the line "0::<path>"; the quota in force is the tightest cpu.max
    // ("<quota> <period>" or "max <period>") of the process's cgroup and its ancestors.
    // cgroup v1: the line "<n>:<controllers>:<path>" whose controllers include cpu; the
    // hierarchy is mounted at <root>/cpu (Debian: a link to cpu,cpuacct).
    std::size_t v2 = 0, v1 = 0;
    bool v2_seen = false;
    std::istringstream lines(self_cgroup);
    for (std::string line; std::getline(lines, line);) {
      const auto c1 = line.find(':');
      const auto c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
      if (c2 == std::string::npos) continue;
      const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
      std::string path = line.substr(c2 + 1);
      while (!path.empty() && path.back() == '/') path.pop_back();
      if (id == "0" && controllers.empty()) {
        v2_seen = true;
        for (;;) {  // from the process's own cgroup up to the root
          std::istringstream max(first_line(fs_root + path + "/cpu.max"));
          std::string quota;
          double period = 0;
          if (max >> quota >> period && quota != "max") v2 = tighter(v2, quota_cpus(std::stod(quota), period));
          if (path.empty()) break;
          path.erase(path.rfind('/'));
        }
      } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
        const std::string dir = fs_root + "/cpu" + path;
        const std::string q = first_line(dir + "/cpu.cfs_quota_us"), p = first_line(dir + "/cpu.cfs_period_us");
        if (!q.empty() && !p.empty()) v1 = quota_cpus(std::stod(q), std::stod(p));
      }
    }
    if (!v2_seen && v1 == 0) {
      // No /proc/self/cgroup to go by (or no cpu line): the mount's own root, as a
      // container with its own cgroup namespace shows it.
      std::istringstream max(first_line(fs_root + "/cpu.max"));
      std::string quota;
      double period = 0;
      if (max >> quota >> period && quota != "max") v2 = quota_cpus(std::stod(quota), period);
    }
    return tighter(v2, v1);
  } catch (...) {  // an unreadable or malformed quota: none
    return 0;
  }
}

std::size_t cgroup_cpu_quota() noexcept {
  std::string self;
  {
    std::ifstream f("/proc/self/cgroup");
    std::ostringstream text;
    text << f.rdbuf();
    self = text.str();
  }
  return cgroup_cpu_quota("/sys/fs/cgroup", self);
}

std::size_t physical_core_count() noexcept {
  // The cores that hold at least one CPU of the affinity mask: a process started under
  // taskset or a cpuset on 2 CPUs of a 64-core machine counts 2, not 64.
  topology& topo = topology::get();
  const int n = topo.cores();
  cpu_set_t set;
  const bool have_mask = sched_getaffinity(0, sizeof set, &set) == 0;
  if (n > 0 && have_mask) {
    hwloc_bitmap_t mask = hwloc_bitmap_alloc();
    if (mask != nullptr) {
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set)) hwloc_bitmap_set(mask, static_cast<unsigned>(cpu));
      std::size_t cores = 0;
      for (int i = 0; i < n; ++i)
        if (hwloc_bitmap_intersects(topo.core(static_cast<unsigned>(i))->cpuset, mask)) ++cores;
      hwloc_bitmap_free(mask);
      // None: the topology does not describe these CPUs (a synthetic or restricted one).
      if (cores > 0) return cores;
    }
  }
  if (n > 0 && !have_mask) return static_cast<std::size_t>(n);
  return affinity_cpu_count();
}

std::size_t available_cpu_count() noexcept {
  const std::size_t n = affinity_cpu_count();
  const std::size_t quota = cgroup_cpu_quota();
  return quota != 0 ? std::min(n, quota) : n;
}

void compute_steal_orders(pool_impl& pool) {
  // Victims nearest first: by the depth of the deepest hwloc object a victim's core
  // shares with the thief's (deeper = nearer), then by ring distance (j - i mod n) so
  // that thieves at the same distance start at different victims. Worker i runs on core
  // i mod cores, so the depths are those of core pairs: computed once per pair, and the
  // victims bucketed by depth in O(n) per order (a pool of thousands of workers would
  // spend seconds in per-pair hwloc calls and sorts).
  // One order per core class (workers with the same i mod c, c the cores in use): the
  // order of worker i is that of worker i mod c shifted by i - i mod c, so a pool of n
  // workers on c cores keeps c orders, not n (a 4,096-worker pool on 2 cores: 2 lists,
  // not 64 MiB of them). Exact when c divides n; otherwise, near the ring's wrap, a
  // shifted order may rank a victim by its neighbour's core (still every other worker,
  // once each).
  topology& topo = topology::get();
  const unsigned n = static_cast<unsigned>(pool.m_workers.size());
  const unsigned cores = static_cast<unsigned>(std::max(0, topo.cores()));
  const unsigned c = std::min(n, cores);  // distinct cores in use (0: no topology)
  std::vector<int> depth(std::size_t{c} * c, 0);
  for (unsigned a = 0; a < c; ++a)
    for (unsigned b = 0; b < c; ++b) {
      hwloc_obj_t common = hwloc_get_common_ancestor_obj(topo.handle(), topo.core(a), topo.core(b));
      depth[std::size_t{a} * c + b] = common != nullptr ? static_cast<int>(common->depth) : 0;
    }
  std::vector<int> levels(depth.begin(), depth.end());
  levels.push_back(0);
  std::sort(levels.begin(), levels.end(), std::greater<>());  // deepest first
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const unsigned classes = std::max(1u, c);
  pool.m_steal_orders.assign(classes, {});
  for (unsigned a = 0; a < classes; ++a) {
    auto& order = pool.m_steal_orders[a];
    order.reserve(n - 1);
    for (int level : levels)
      for (unsigned dist = 1; dist < n; ++dist) {
        const unsigned j = (a + dist) % n;
        const int d = c == 0 ? 0 : depth[std::size_t{a} * c + j % c];
        if (d == level) order.push_back(j);
      }
  }
  for (unsigned i = 0; i < n; ++i) {
    worker& w = *pool.m_workers[i];
    const std::vector<std::uint32_t>& order = pool.m_steal_orders[i % classes];
    w.m_victim_order = order.data();
    w.m_victim_count = static_cast<std::uint32_t>(order.size());
    w.m_victim_shift = i - i % classes;
  }
}

void pin_current_thread(unsigned index) noexcept {
  topology& topo = topology::get();
  static std::mutex m;  // hwloc topology calls are not documented thread-safe for binding
  std::lock_guard lock(m);
  if (hwloc_obj_t core = topo.core(index)) {
    hwloc_cpuset_t set = hwloc_bitmap_dup(core->cpuset);
    hwloc_bitmap_singlify(set);
    hwloc_set_cpubind(topo.handle(), set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(set);
  }
}

}  // namespace weft::detail

namespace weft {

std::size_t default_thread_count() {
  static const std::size_t n = [] {
    // A quota below the cores caps them; one above them adds nothing but contention.
    const std::size_t quota = detail::cgroup_cpu_quota();
    const std::size_t cores = detail::physical_core_count();
    return std::max<std::size_t>(1, quota != 0 ? std::min(quota, cores) : cores);
  }();
  return n;
}

}  // namespace weft
