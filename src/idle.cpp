// src/idle.cpp: spinning, parking and waking.
//
// The pool's idle word m_idle counts parked workers (low half) and searching workers
// (high half). Protocol:
// * A worker about to park, once registered, makes sure every worker's share requests
//   are raised. The next push there shares half of the pusher's private work and, when
//   some worker is parked and nobody is searching, wakes one (a searcher would find the
//   work anyway). The push path itself reads only the request flag of its own deque.
//   Requests stay raised until answered, so the parker raises only those answered since
//   the last park: an owner that clears its requests (share(), share_all()) sets its bit
//   in m_unasked_bits afterwards (seq_cst fence, then bit test, then fetch_or if clear),
//   and the parker takes the set bits (exchange, seq_cst fence) and raises those
//   workers' requests. Either the parker takes the bit after the clearing, and its
//   requests land after it, or it took the bits before the owner's fetch_or, and the
//   owner's later seq_cst read of m_idle (on_work_available) sees the parker registered
//   and wakes one. Cost per park: O(workers / 64) words plus the workers that answered.
//   If a request is lost anyway, no work is: it is in the pusher's own deque and the
//   pusher runs it itself (only parallelism is lost, until a later request or search).
// * Work posted from outside goes into an inbox with a seq_cst increment of its size,
//   then notify_external() reads m_idle (seq_cst); a parking worker registers in m_idle
//   (seq_cst) and then re-reads the inbox sizes and deque words (seq_cst). In the single
//   total order one of the two sees the other, so an external post never sleeps
//   unnoticed.
// * Which inboxes and deques the parker re-reads: those whose bit is set in m_work_bits.
//   Whoever publishes work (share(), an inbox push) sets the worker's bit (seq_cst, after
//   publishing, before reading m_idle); only the parkers' scan clears a bit, and only
//   when that worker shows no work, and then it looks once more (clear, then re-read:
//   work published meanwhile is either seen or sets the bit again). So a worker with
//   work has its bit set, or its publisher has yet to read m_idle, and the scan costs
//   O(workers / 64) words plus the workers marked.
// * A waker takes a parked worker off the list, moves it from "parked" to "searching"
//   in one atomic step, sets its futex word and wakes it. A searcher that finds work
//   stops searching; if it was the last searcher and workers are parked, it wakes one
//   more (there may be more work where it found some).
// * Shutdown: stop() sets m_stopping, waits until no foreign thread is inside
//   schedule() (so none touches the pool after its destruction), and wakes one parked
//   worker. Workers drain all work; the last worker to park, finding every other worker
//   parked and every queue empty under m_idle_mutex, sets m_done and wakes all, and
//   they exit. Parked workers cannot take or make work, and foreign threads can no
//   longer post, so the check is stable.
// * With a reactor (weft::io::io_pool: weft/detail/reactor.hpp) a parked worker waits in
//   it instead of on its futex word; wake_up() wakes it there. Its own events (an I/O
//   completion) end the wait too: then it takes itself off the parked list (unpark())
//   before it runs anything, so a parked worker still never takes or makes work.
#include <algorithm>
#include <bit>
#include <climits>
#include <thread>

#include "futex.hpp"
#include "pool_impl.hpp"

namespace weft::detail {

namespace {
void wake_locked(pool_impl& pool, worker& w, bool as_searcher) noexcept {
  // Caller holds m_idle_mutex and has removed w from m_sleeping.
  pool.m_idle.fetch_add(as_searcher ? k_searching_one - 1 : std::uint64_t(-1), std::memory_order_seq_cst);
  w.m_futex.store(1, std::memory_order_release);  // pairs with the acquire load in park()
  w.wake_up();
}
}  // namespace

void worker::wake_up() noexcept {
  if (m_reactor != nullptr) {
    m_reactor->wake();
  } else {
    futex_wake_one(m_futex);
  }
}

namespace {
bool has_work_seq_cst(const worker& w) noexcept {
  for (unsigned p = 0; p < w.m_prios; ++p)
    if (w.m_deques[p].stealable_seq_cst() || !w.m_inbox.empty(p, std::memory_order_seq_cst)) return true;
  return false;
}

/// Sets bit `index` of a bitmap, seq_cst. Test first: a bit that stays set (a busy pool's)
/// then costs a read, and the word's line stays shared.
void set_bit(std::atomic<std::uint64_t>* words, unsigned index) noexcept {
  std::atomic<std::uint64_t>& word = words[index / 64];
  const std::uint64_t bit = std::uint64_t{1} << (index % 64);
  if ((word.load(std::memory_order_seq_cst) & bit) == 0) word.fetch_or(bit, std::memory_order_seq_cst);
}
}  // namespace

void pool_impl::mark_work(unsigned index) noexcept { set_bit(m_work_bits.get(), index); }

bool pool_impl::any_work_seq_cst() noexcept {
  for (std::size_t i = 0; i < m_work_words; ++i) {
    std::uint64_t bits = m_work_bits[i].load(std::memory_order_seq_cst);
    while (bits != 0) {
      const unsigned b = static_cast<unsigned>(std::countr_zero(bits));
      bits &= bits - 1;
      const worker& w = *m_workers[i * 64 + b];
      if (has_work_seq_cst(w)) return true;
      // Stale: clear it, then look again, so that work published meanwhile is either
      // seen here or sets the bit again after the clear.
      m_work_bits[i].fetch_and(~(std::uint64_t{1} << b), std::memory_order_seq_cst);
      if (has_work_seq_cst(w)) {
        m_work_bits[i].fetch_or(std::uint64_t{1} << b, std::memory_order_seq_cst);
        return true;
      }
    }
  }
  return false;
}

void pool_impl::mark_unasked(unsigned index) noexcept {
  // The fence puts the caller's clearing of its requests before the look at the bit in
  // the total order: a bit still set then belongs to no asker yet, and the one that
  // takes it raises the requests after the clearing (its own fence, ask_to_share()).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  set_bit(m_unasked_bits.get(), index);
}

void pool_impl::ask_to_share() noexcept {
  for (std::size_t i = 0; i < m_work_words; ++i) {
    if (m_unasked_bits[i].load(std::memory_order_seq_cst) == 0) continue;
    std::uint64_t bits = m_unasked_bits[i].exchange(0, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with mark_unasked()'s
    while (bits != 0) {
      const unsigned b = static_cast<unsigned>(std::countr_zero(bits));
      bits &= bits - 1;
      worker& w = *m_workers[i * 64 + b];
      for (unsigned p = 0; p < w.m_prios; ++p) w.m_deques[p].request_share();
    }
  }
}

void pool_impl::wake_one() noexcept {
  std::lock_guard lock(m_idle_mutex);
  if (m_sleeping.empty()) return;
  worker* w = m_sleeping.back();
  m_sleeping.pop_back();
  wake_locked(*this, *w, true);
}

void pool_impl::wake_if_unsearched() noexcept {
  const std::uint64_t s = m_idle.load(std::memory_order_seq_cst);
  if (s - 1 < k_sleepers_mask) wake_one();  // 1 <= parked and searching == 0, in one comparison
}

void pool_impl::notify_external() noexcept {
  wake_if_unsearched();  // its seq_cst read comes after the seq_cst inbox increment
}

void pool_impl::leave_searching(worker& w) noexcept {
  if (!w.m_searching) return;
  w.m_searching = false;
  const std::uint64_t prev = m_idle.fetch_sub(k_searching_one, std::memory_order_seq_cst);
  if ((prev >> 32) == 1 && (prev & k_sleepers_mask) != 0) wake_one();
}

bool worker::park() noexcept {
  if (m_searching) {
    m_searching = false;
    m_pool.m_idle.fetch_sub(k_searching_one, std::memory_order_seq_cst);
  }
  pool_impl& pool = m_pool;
  {
    std::unique_lock lock(pool.m_idle_mutex);
    if (pool.m_done.load(std::memory_order_relaxed)) return true;
    if (pool.m_stopping.load(std::memory_order_seq_cst) && pool.m_sleeping.size() + 1 == pool.m_workers.size() &&
        !pool.any_work_seq_cst()) {
      pool.m_done.store(true, std::memory_order_relaxed);
      for (worker* w : pool.m_sleeping) wake_locked(pool, *w, false);
      pool.m_sleeping.clear();
      return true;
    }
    m_futex.store(0, std::memory_order_relaxed);
    pool.m_sleeping.push_back(this);
    pool.m_idle.fetch_add(1, std::memory_order_seq_cst);
  }
  // Ask the workers to share their private work at their next push: that push then sees
  // this worker parked (on_work_available) and wakes it. Only those that answered since
  // the last park need asking; the others' requests are still raised.
  pool.ask_to_share();
  if (pool.any_work_seq_cst() && unpark()) return false;
  // Else: a waker may have taken us off the list already; its wake-up is consumed below.
  const std::int64_t since = steady_ns();
  worker_counters::add(m_counters.parks);
  m_counters.deque_depth.store(0, std::memory_order_relaxed);  // it found none
  m_counters.parked_since.store(since, std::memory_order_relaxed);
  const bool own_events = m_reactor != nullptr && wait_in_reactor();
  if (m_reactor == nullptr)
    while (m_futex.load(std::memory_order_acquire) == 0) futex_wait(m_futex, 0);
  m_counters.parked_since.store(0, std::memory_order_relaxed);
  m_counters.parked_ns.store(m_counters.parked_ns.load(std::memory_order_relaxed) + (steady_ns() - since),
                             std::memory_order_relaxed);
  if (own_events) return false;  // its own events woke it: back to the loop, not parked
  if (pool.m_done.load(std::memory_order_relaxed)) return true;
  m_searching = true;  // the waker counted us as a searcher
  return false;
}

bool worker::unpark() noexcept {
  std::lock_guard lock(m_pool.m_idle_mutex);
  auto it = std::find(m_pool.m_sleeping.begin(), m_pool.m_sleeping.end(), this);
  if (it == m_pool.m_sleeping.end()) return false;  // a waker took it off the list: its wake-up stands
  m_pool.m_sleeping.erase(it);
  m_pool.m_idle.fetch_sub(1, std::memory_order_seq_cst);
  return true;
}

bool worker::wait_in_reactor() noexcept {
  // Parked with a reactor (an io_pool ring): wait there, so that both a waker (m_futex,
  // then wake()) and the reactor's own events (a completion, a call queued to the ring)
  // end the wait. For the latter the worker takes itself off the parked list and goes
  // back to its loop, which polls the reactor. A waker that took it off the list first
  // has stored m_futex under m_idle_mutex already, so unpark() failing means m_futex is 1.
  while (m_futex.load(std::memory_order_acquire) == 0) {
    if (m_reactor->pending() && unpark()) return true;
    if (m_futex.load(std::memory_order_acquire) != 0) break;
    m_reactor->wait();
  }
  return false;
}

void pool_impl::stop() noexcept {
  m_stopping.store(true, std::memory_order_seq_cst);
  // Let foreign threads that got in before the stop finish queueing (and finish
  // touching this pool): their work is then visible to the drain below.
  while (m_schedulers.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  // One parked worker is enough: it parks again, finds everyone else parked and, once
  // no work is left, ends the pool for all (park()). Workers still running do the same
  // check when they park. Waking all would make each of them search every victim.
  wake_one();
  for (auto& w : m_workers)
    if (w->m_thread.joinable()) w->m_thread.join();
}

}  // namespace weft::detail
