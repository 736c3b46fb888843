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

/// CPU quota from cgroup v2 (cpu.max) or v1 (cfs quota/period), rounded up; 0 if none.
std::size_t cgroup_cpu_quota() {
  {
    std::ifstream f("/sys/fs/cgroup/cpu.max");
    std::string quota;
    long period = 0;
    if (f >> quota >> period && quota != "max" && period > 0) {
      const double q = std::stod(quota);
      return static_cast<std::size_t>(std::ceil(q / static_cast<double>(period)));
    }
  }
  std::ifstream fq("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), fp("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long q = 0, p = 0;
  if (fq >> q && fp >> p && q > 0 && p > 0) return static_cast<std::size_t>((q + p - 1) / p);
  return 0;
}

}  // namespace

std::size_t physical_core_count() noexcept {
  const int n = topology::get().cores();
  if (n > 0) return static_cast<std::size_t>(n);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
  return 1;
}

std::size_t available_cpu_count() noexcept {
  std::size_t n = 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
  std::size_t quota = 0;
  try {
    quota = cgroup_cpu_quota();
  } catch (...) {  // an unreadable quota: none
  }
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
    const std::size_t quota = detail::cgroup_cpu_quota();
    const std::size_t cores = detail::physical_core_count();
    return quota != 0 ? std::max<std::size_t>(1, quota) : std::max<std::size_t>(1, cores);
  }();
  return n;
}

}  // namespace weft
