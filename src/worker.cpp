// src/worker.cpp: the worker loop.
//
// A worker runs work until it finds none, then searches (stealing.cpp), then parks
// (idle.cpp). Work is a coroutine frame address; resuming it usually runs a whole chain
// of tasks by symmetric transfer (forks, inline joins, completions that hand over to
// the next local item via take_local()), so the loop is only re-entered when a chain
// ends: a task waits on something, or its continuation belongs to another thread.
//
// Order (find_work): for each priority, highest first: this worker's deque, its inbox,
// then whatever other workers have shared or were posted at that priority. Every 61st
// round the inbox goes before the deque so that posts cannot starve behind a worker
// that keeps producing local work.
#include <coroutine>
#include <cstdio>

#include "pool_impl.hpp"
#include "weft/yield.hpp"

namespace weft::detail {

namespace {
/// With a reactor: items a busy worker runs between two polls of it.
constexpr unsigned k_poll_every = 32;
}  // namespace

constinit thread_local worker_context* t_worker = nullptr;
constinit thread_local executor* t_executor = nullptr;
constinit thread_local unsigned t_prio = 0;

// ---- inbox -------------------------------------------------------------------------

void inbox::push(unsigned prio, void* item) {
  std::lock_guard lock(m_mutex);
  m_queues[prio].push_back(item);
  m_sizes[prio].value.fetch_add(1, std::memory_order_seq_cst);  // pairs with a parker's seq_cst check
}

void inbox::push_many(unsigned prio, void* const* items, std::size_t n) {
  std::lock_guard lock(m_mutex);
  m_queues[prio].insert(m_queues[prio].end(), items, items + n);
  m_sizes[prio].value.fetch_add(n, std::memory_order_seq_cst);
}

void* inbox::pop(unsigned prio) noexcept {
  if (empty(prio)) return nullptr;
  std::lock_guard lock(m_mutex);
  auto& q = m_queues[prio];
  if (q.empty()) return nullptr;
  void* item = q.front();
  q.pop_front();
  m_sizes[prio].value.fetch_sub(1, std::memory_order_relaxed);
  return item;
}

void* inbox::try_steal(unsigned prio) noexcept {
  if (empty(prio)) return nullptr;
  std::unique_lock lock(m_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return nullptr;
  auto& q = m_queues[prio];
  if (q.empty()) return nullptr;
  void* item = q.front();
  q.pop_front();
  m_sizes[prio].value.fetch_sub(1, std::memory_order_relaxed);
  return item;
}

// ---- worker ------------------------------------------------------------------------

worker::worker(pool_impl& pool, unsigned index, unsigned prios)
    : m_pool(pool), m_deque_storage(new split_deque[prios]), m_inbox(prios) {
  m_deques = m_deque_storage.get();
  m_prios = prios;
  m_index = index;
  m_executor = &pool.m_owner;
  m_inline_limit.store(prios, std::memory_order_relaxed);
}

// The user's thread hooks (pool_options): an exception escaping one ends the process
// with a message instead of a bare std::terminate from the thread's entry function.
template <class Fn>
void run_thread_hook(const Fn& hook, std::size_t index, const char* which) noexcept {
  if (!hook) return;
  try {
    hook(index);
  } catch (...) {
    std::fprintf(stderr, "weft::thread_pool: pool_options::%s threw on worker %zu; terminating\n", which, index);
    std::terminate();
  }
}

void worker::run() {
  t_worker = this;
  t_executor = &m_pool.m_owner;
  t_prio = 0;
  const pool_options& opts = m_pool.m_opts;
  t_unhandled_exception_hook = opts.on_unhandled_exception ? &opts.on_unhandled_exception : nullptr;
  if (opts.pin) pin_current_thread(m_index);
  run_thread_hook(opts.on_thread_start, m_index, "on_thread_start");
  if (m_reactor != nullptr) m_reactor->attach(m_index);
  m_counters.started.store(steady_ns(), std::memory_order_relaxed);
  unsigned io_tick = 0;
  for (;;) {
    void* item = find_work();
    if (m_reactor != nullptr) [[unlikely]] {
      // Idle: completions first (they resume their tasks right here), then stealing.
      // Busy: a look every k_poll_every items, so that I/O is not starved by compute.
      if (item == nullptr ? m_reactor->poll() : (++io_tick % k_poll_every == 0 && m_reactor->poll())) {
        m_pool.leave_searching(*this);
        if (item == nullptr) continue;
      }
    }
    if (item != nullptr) {
      m_pool.leave_searching(*this);  // a woken worker may have found it here
    } else {
      bool ran_io = false;
      item = search(ran_io);
      if (ran_io) continue;  // it resumed tasks of completed I/O: back to the queues
    }
    if (item == nullptr) {
      if (park()) break;
      continue;
    }
    worker_counters::add(m_counters.tasks_run);
    std::coroutine_handle<>::from_address(item).resume();
  }
  if (m_reactor != nullptr) m_reactor->detach();
  run_thread_hook(opts.on_thread_stop, m_index, "on_thread_stop");
  t_unhandled_exception_hook = nullptr;
  t_worker = nullptr;
  t_executor = nullptr;
}

void* worker::find_work() noexcept {
  // Whatever was announced as urgent is found below, in priority order.
  if (m_inline_limit.load(std::memory_order_relaxed) != m_prios)
    m_inline_limit.store(m_prios, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);  // pairs with announce_urgent's release store
  const bool inbox_first = ++m_tick % 61 == 0;
  if (inbox_first) publish_depth();
  for (unsigned p = 0; p < m_prios; ++p) m_deques[p].restore_lone_credit();  // a new run (split_deque.hpp)
  for (unsigned p = 0; p < m_prios; ++p) {
    void* item = inbox_first ? m_inbox.pop(p) : nullptr;
    if (item == nullptr) {
      if ((item = pop_local(*this, p)) != nullptr) {  // own work: no posted backlog to announce
        t_prio = p;
        return item;
      }
    }
    if (item == nullptr && !inbox_first) item = m_inbox.pop(p);
    if (item == nullptr && m_prios > 1) item = steal_at(p, false);  // strict priority across workers
    if (item != nullptr) {
      t_prio = p;
      rearm_if_more(p);  // taken from an inbox or another worker: more may be queued behind it
      return item;
    }
  }
  return nullptr;
}

void worker::publish_depth() noexcept {
  std::uint32_t depth = 0;
  for (unsigned p = 0; p < m_prios; ++p) depth += m_deques[p].owner_depth();
  m_counters.deque_depth.store(depth, std::memory_order_relaxed);
}

// ---- hooks used by the inline fast paths ---------------------------------------------

void* take_urgent(worker_context& ctx, unsigned below) noexcept {
  auto& w = static_cast<worker&>(ctx);
  w.m_inline_limit.store(w.m_prios, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);  // pairs with announce_urgent's release store
  for (unsigned p = 0; p < below && p < w.m_prios; ++p) {
    void* item = w.m_inbox.pop(p);
    if (item == nullptr) item = w.steal_at(p, false);
    if (item != nullptr) {
      t_prio = p;
      w.rearm_if_more(p);
      return item;
    }
  }
  return nullptr;
}

void worker::rearm_if_more(unsigned prio) noexcept {
  // One announcement may stand for several posts: while more work at `prio` waits in
  // the inbox, keep lower-priority joins (and take_local) on the slow path so that the
  // whole backlog runs before lower-priority work resumes. Other workers' inboxes count
  // too: their owners may be busy, and this worker can steal from them.
  if (prio + 1 >= m_prios) return;
  for (const auto& other : m_pool.m_workers) {
    if (!other->m_inbox.empty(prio)) {
      lower_inline_limit(*this, prio + 1);
      return;
    }
  }
}

void lower_inline_limit(worker_context& w, unsigned limit) noexcept {
  unsigned cur = w.m_inline_limit.load(std::memory_order_relaxed);
  while (cur > limit &&
         !w.m_inline_limit.compare_exchange_weak(cur, limit, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

void on_work_available(worker_context& ctx, split_deque& d, bool plain) noexcept {
  auto& w = static_cast<worker&>(ctx);
  const bool shared = d.share(!plain);
  // share() cleared the request: a worker that parks from now on must ask again.
  w.m_pool.mark_unasked(w.m_index);
  if (!shared) return;
  w.m_pool.mark_work(w.m_index);
  // The seq_cst read of the idle word, after share()'s seq_cst CAS and mark_work(), pairs
  // with a parking worker's registration and re-check in park() (one of the two sees
  // the other).
  w.m_pool.wake_if_unsearched();
}

void push_overflow(worker_context& ctx, unsigned prio, void* item) {
  auto& w = static_cast<worker&>(ctx);
  w.m_inbox.push(prio, item);
  w.m_pool.mark_work(w.m_index);
  w.m_pool.notify_external();
}

bool higher_priority_waiting() noexcept {
  auto* self = static_cast<worker*>(t_worker);
  if (self == nullptr) return false;
  const unsigned mine = t_prio;
  for (unsigned p = 0; p < mine && p < self->m_prios; ++p) {
    if (self->m_deques[p].has_private() || self->m_deques[p].looks_stealable() || !self->m_inbox.empty(p)) return true;
    for (const auto& other : self->m_pool.m_workers)
      if (self->m_pool.may_have_work(other->m_index) &&  // a bit, not two lines, for idle workers
          (other->m_deques[p].looks_stealable() || !other->m_inbox.empty(p)))
        return true;
  }
  return false;
}

void requeue_current(std::coroutine_handle<> h) noexcept {
  auto* self = static_cast<worker*>(t_worker);
  push_local(*self, t_prio, h.address(), true);
}

}  // namespace weft::detail
