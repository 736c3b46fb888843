// src/pool_impl.hpp: private state of weft::thread_pool, shared by the files that
// implement it: worker.cpp (the worker loop), stealing.cpp (victims and stealing),
// idle.cpp (spinning, parking, waking), topology.cpp (hwloc), pool.cpp (lifecycle),
// metrics.cpp (the counters' snapshot).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/detail/reactor.hpp"
#include "weft/detail/split_deque.hpp"
#include "weft/detail/worker_context.hpp"
#include "weft/metrics.hpp"
#include "weft/pool.hpp"

namespace weft::detail {

/// The most steal rounds pool_options::spins may ask for (see there).
inline constexpr unsigned k_max_spins = 65536;

class pool_impl;

/// Work posted from outside the pool, one FIFO per priority. Owner and thieves take
/// from it under its mutex; `m_size` lets everyone test emptiness without the lock.
class inbox {
 public:
  explicit inbox(unsigned prios) : m_queues(prios), m_sizes(prios) {}
  void push(unsigned prio, void* item);
  void push_many(unsigned prio, void* const* items, std::size_t n);
  void* pop(unsigned prio) noexcept;        // owner: blocking lock
  void* try_steal(unsigned prio) noexcept;  // thieves: try_lock only
  bool empty(unsigned prio, std::memory_order mo = std::memory_order_relaxed) const noexcept {
    return m_sizes[prio].value.load(mo) == 0;
  }
  std::size_t size(unsigned prio) const noexcept { return m_sizes[prio].value.load(std::memory_order_relaxed); }

 private:
  struct alignas(k_cache_line) counter {
    std::atomic<std::size_t> value{0};
  };
  std::mutex m_mutex;
  std::vector<std::deque<void*>> m_queues;
  std::vector<counter> m_sizes;
};

/// A worker's own counters (weft/metrics.hpp): written only by the worker, with a
/// relaxed load and store (no read-modify-write), read by metrics() from any thread.
struct alignas(k_cache_line) worker_counters {
  std::atomic<std::uint64_t> tasks_run{0};
  std::atomic<std::uint64_t> tasks_stolen{0};
  std::atomic<std::uint64_t> steal_attempts{0};
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::int64_t> parked_ns{0};     // parks that ended
  std::atomic<std::int64_t> parked_since{0};  // steady clock ns of the park in progress, 0: none
  std::atomic<std::int64_t> started{0};       // steady clock ns when the worker started, 0: not yet
  std::atomic<std::uint32_t> deque_depth{0};

  static void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

/// Steady clock nanoseconds (the clock of worker_counters).
std::int64_t steady_ns() noexcept;

/// One worker thread. The worker_context base is what inline fast paths see.
struct alignas(k_cache_line) worker : worker_context {
  worker(pool_impl& pool, unsigned index, unsigned prios);

  void run();                                        // the loop (worker.cpp)
  void* find_work() noexcept;                        // highest priority first (worker.cpp)
  void* search(bool& ran_io) noexcept;               // steal while searching (stealing.cpp)
  void* steal_at(unsigned prio, bool ask) noexcept;  // one sweep over the victims (stealing.cpp)
  void publish_depth() noexcept;                     // worker_counters::deque_depth (worker.cpp)
  bool park() noexcept;                              // true when the pool is finished (idle.cpp)
  void wake_up() noexcept;                           // after m_futex = 1: end its wait (idle.cpp)
  bool unpark() noexcept;                            // off the parked list, unless a waker took it off (idle.cpp)
  bool wait_in_reactor() noexcept;             // park()'s wait with a reactor; true: its events ended it (idle.cpp)
  void rearm_if_more(unsigned prio) noexcept;  // keep urgent work announced (worker.cpp)
  bool lone_ripe(std::size_t key, std::uint64_t word) noexcept;  // patience with lone items (stealing.cpp)

  pool_impl& m_pool;
  std::unique_ptr<split_deque[]> m_deque_storage;
  inbox m_inbox;
  // Steal order, nearest first (topology.cpp): the k-th victim is worker
  // (m_victim_order[k] + m_victim_shift) mod workers; the order is shared by the workers
  // of one core class.
  const std::uint32_t* m_victim_order = nullptr;
  std::uint32_t m_victim_count = 0;
  std::uint32_t m_victim_shift = 0;
  unsigned m_tick = 0;
  // The last lone word seen at a victim's deque of some priority, and since when
  // (stealing.cpp): a direct-mapped table of k_lone_slots, keyed by victim * m_prios +
  // prio, so that its size does not grow with the pool (a key that shares its slot with
  // another only restarts that sighting's patience).
  static constexpr std::size_t k_lone_slots = 64;
  struct lone_sighting {
    std::size_t key = static_cast<std::size_t>(-1);
    std::uint64_t word = 0;
    std::int64_t since_ns = 0;
  };
  std::array<lone_sighting, k_lone_slots> m_lone_seen{};
  bool m_searching = false;             // counted as a searcher in the pool's idle word
  worker_reactor* m_reactor = nullptr;  // weft::io::io_pool's ring of this worker, if any
  worker_counters m_counters;
  alignas(k_cache_line) std::atomic<std::uint32_t> m_futex{0};  // 1 = woken
  std::thread m_thread;
};

class pool_impl {
 public:
  pool_impl(thread_pool& owner, const pool_options& opts, std::span<worker_reactor* const> reactors = {});
  ~pool_impl();

  void start();
  void stop() noexcept;  // drain and join (idle.cpp documents the protocol)

  void schedule(void* item, unsigned prio);      // from any thread
  pool_metrics metrics() const;                  // from any thread (metrics.cpp)
  void announce_urgent(unsigned prio) noexcept;  // lower every worker's m_inline_limit to prio + 1
  worker* current_worker() const noexcept;       // the calling thread's worker of this pool, or null

  // idle.cpp
  void wake_one() noexcept;            // wake a parked worker as a searcher, if any
  void wake_if_unsearched() noexcept;  // wake_one() if some worker is parked and none searching (seq_cst read)
  void notify_external() noexcept;     // after an inbox push: make sure someone looks
  bool any_work_seq_cst() noexcept;
  void leave_searching(worker& w) noexcept;
  void mark_work(unsigned index) noexcept;     // after publishing work in worker index's deque or inbox
  void mark_unasked(unsigned index) noexcept;  // after worker index cleared its share requests
  void ask_to_share() noexcept;                // raise the share requests of every unasked worker
  // Racy: may worker index have published work? False only while it has none (or while
  // its publisher has yet to mark it): thieves skip the others' deques and inboxes.
  bool may_have_work(unsigned index) const noexcept {
    return ((m_work_bits[index / 64].load(std::memory_order_relaxed) >> (index % 64)) & 1) != 0;
  }

  thread_pool& m_owner;
  pool_options m_opts;
  std::int64_t m_started_ns = 0;  // steady clock, when start() began (metrics' uptime)
  std::vector<std::unique_ptr<worker>> m_workers;
  std::vector<std::vector<std::uint32_t>> m_steal_orders;  // one per core class (topology.cpp)

  alignas(k_cache_line) std::atomic<std::uint64_t> m_idle{0};  // sleepers | searching << 32
  std::uint64_t m_max_searchers = 1;                           // workers searching at once (stealing.cpp)
  alignas(k_cache_line) std::mutex m_idle_mutex;
  std::vector<worker*> m_sleeping;  // guarded by m_idle_mutex
  std::atomic<bool> m_done{false};  // set under m_idle_mutex when the pool has drained
  std::atomic<bool> m_stopping{false};
  // Foreign threads inside schedule(): the pool may not be destroyed under them (a
  // task they queue can finish, and its owner destroy the pool, before they return).
  std::atomic<std::uint32_t> m_schedulers{0};
  std::atomic<unsigned> m_next_inbox{0};
  // Workers that may have shared or posted work, a bit each (idle.cpp): a parking
  // worker looks only at those, in O(workers / 64) words.
  std::size_t m_work_words = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> m_work_bits;
  // Workers whose share requests were answered (cleared) since they were last raised,
  // a bit each (idle.cpp): a parking or searching worker asks only those, so its cost is
  // O(workers / 64) words plus the workers that answered since the previous ask.
  std::unique_ptr<std::atomic<std::uint64_t>[]> m_unasked_bits;
};

// topology.cpp
void compute_steal_orders(pool_impl& pool);
void pin_current_thread(unsigned index) noexcept;
/// Physical cores (hwloc) holding a CPU of this process's affinity mask; without a
/// topology that describes them, the CPUs of the mask. At least 1.
std::size_t physical_core_count() noexcept;
/// CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota.
std::size_t available_cpu_count() noexcept;
/// The cgroup CPU quota (CPUs, rounded up; 0: none) for a process whose
/// /proc/self/cgroup reads `self_cgroup`, with the cgroup file system at `fs_root`: v2,
/// the tightest cpu.max of its cgroup and every ancestor; v1, the cpu controller's CFS
/// quota. Never throws: unreadable or malformed files count as no quota.
std::size_t cgroup_cpu_quota(const std::string& fs_root, const std::string& self_cgroup) noexcept;
/// cgroup_cpu_quota for this process (/proc/self/cgroup, /sys/fs/cgroup).
std::size_t cgroup_cpu_quota() noexcept;

/// Lowers w.m_inline_limit to `limit` unless it is lower already (any thread; worker.cpp).
void lower_inline_limit(worker_context& w, unsigned limit) noexcept;

/// The running worker's pool_options::on_unhandled_exception, or null where there is
/// none (set by worker::run; read by report_detached_exception, src/task.cpp).
extern constinit thread_local const std::function<void(std::exception_ptr)>* t_unhandled_exception_hook;

}  // namespace weft::detail
