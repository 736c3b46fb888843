// src/stealing.cpp: the stealing policy.
//
// Victims are visited in the order compute_steal_orders() (topology.cpp) gave each
// worker: nearest in the hwloc tree first. A victim whose bit in the pool's work bitmap
// is clear has published nothing (idle.cpp) and is skipped at the cost of one bit, so a
// sweep over a big, mostly idle pool reads a few words rather than two lines per
// worker. At each other victim a thief tries the shared region of the deque (oldest
// work first) and then the inbox. When the shared region is empty the thief, if `ask`
// is set, raises the victim's share request: the victim publishes half of its private
// work at its next push or pop (weft/detail/split_deque.hpp), so a searching thief
// usually succeeds on one of its next sweeps. The skipped victims are asked once per
// search, through pool_impl::ask_to_share() (only those that answered since they were
// last asked need it).
//
// Lone items (see weft/detail/split_deque.hpp) are not taken at first sight: a thief
// takes one only after it has seen the victim's public word unchanged for
// k_lone_patience. An owner about to join its only child pops it back within
// nanoseconds (the word changes), so serial chains of tasks stay on one thread; an
// owner busy with other work leaves it there, and it is stolen 3 us late. (The Go
// scheduler gives its `runnext` slot the same 3 us before stealing it.)
//
// Searching (search()): a worker that found nothing on its own becomes a searcher
// (counted in the pool's idle word, so that producers do not wake more workers while
// someone is already looking), sweeps all victims at all priorities up to `spins`
// times with a pause in between, and either returns work or gives up (then parks).
// At most m_max_searchers search at once (half the workers, and no more than the CPUs
// the process may use); the others park at once.

#include <chrono>

#include "pool_impl.hpp"
#include "weft/detail/spin_lock.hpp"

namespace weft::detail {

namespace {
constexpr std::int64_t k_lone_patience_ns = 3000;

}  // namespace

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool worker::lone_ripe(std::size_t key, std::uint64_t word) noexcept {
  lone_sighting& seen = m_lone_seen[key % k_lone_slots];
  const std::int64_t now = steady_ns();
  if (seen.key != key || seen.word != word) {
    seen.key = key;
    seen.word = word;
    seen.since_ns = now;
    return false;
  }
  return now - seen.since_ns >= k_lone_patience_ns;
}

void* worker::steal_at(unsigned prio, bool ask) noexcept {
  const auto workers = static_cast<std::uint32_t>(m_pool.m_workers.size());
  for (std::uint32_t k = 0; k < m_victim_count; ++k) {
    std::uint32_t v = m_victim_order[k] + m_victim_shift;  // both below `workers`
    if (v >= workers) v -= workers;
    if (!m_pool.may_have_work(v)) continue;           // one bit, instead of its deque's and inbox's lines
    worker_counters::add(m_counters.steal_attempts);  // its deque and inbox
    worker& victim = *m_pool.m_workers[v];
    split_deque& d = victim.m_deques[prio];
    if (ask || d.looks_stealable()) {
      const std::uint64_t word = d.snapshot();
      const std::uint32_t n = split_deque::shared_count(word);
      if (n == 0) {
        if (ask) d.request_share();
      } else if (!split_deque::lone(word) || lone_ripe(std::size_t{v} * m_prios + prio, word)) {
        if (void* item = d.steal_from(word)) {
          worker_counters::add(m_counters.tasks_stolen);
          return item;
        }
      }
    }
    if (void* item = victim.m_inbox.try_steal(prio)) {
      worker_counters::add(m_counters.tasks_stolen);
      return item;
    }
  }
  return nullptr;
}

void* worker::search(bool& ran_io) noexcept {
  ran_io = false;
  // Become a searcher (a woken worker was already counted as one by its waker), unless
  // m_max_searchers are looking already: then park at once. They find what there is to
  // find, and a searcher that takes work while workers are parked wakes one (idle.cpp),
  // so capping them loses nothing; it keeps idle workers of a big or oversubscribed
  // pool from sweeping every victim while the CPUs are needed elsewhere.
  if (!m_searching) {
    std::uint64_t s = m_pool.m_idle.load(std::memory_order_relaxed);
    do {
      if ((s >> 32) >= m_pool.m_max_searchers) return nullptr;
    } while (!m_pool.m_idle.compare_exchange_weak(s, s + k_searching_one, std::memory_order_seq_cst,
                                                  std::memory_order_relaxed));
    m_searching = true;
  }
  // Victims that show no work are skipped (steal_at()), so the sweeps cannot ask them to
  // share: raise the requests the workers answered since they were last raised, once.
  m_pool.ask_to_share();
  const unsigned rounds = m_pool.m_opts.spins == 0 ? 1 : m_pool.m_opts.spins;
  for (unsigned r = 0; r < rounds; ++r) {
    for (unsigned p = 0; p < m_prios; ++p) {
      void* item = m_inbox.pop(p);
      if (item == nullptr) item = steal_at(p, true);
      if (item != nullptr) {
        t_prio = p;
        m_pool.leave_searching(*this);
        return item;
      }
    }
    // An I/O worker's completions are its work too: it looks for them after every sweep,
    // not only once the search is over (so a reply is not held back by the spinning).
    if (m_reactor != nullptr && m_reactor->poll()) {
      m_pool.leave_searching(*this);
      ran_io = true;
      return nullptr;
    }
    for (int i = 0; i < 32; ++i) cpu_relax();
  }
  return nullptr;
}

}  // namespace weft::detail
