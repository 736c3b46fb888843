// src/pool.cpp: thread_pool lifecycle and the external entry point (schedule).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "pool_impl.hpp"

namespace weft::detail {

pool_impl::pool_impl(thread_pool& owner, const pool_options& opts, std::span<worker_reactor* const> reactors)
    : m_owner(owner), m_opts(opts) {
  if (opts.threads == 0)
    throw std::invalid_argument("weft::thread_pool: pool_options::threads must be at least 1 (got 0)");
  if (opts.threads > 4096)
    throw std::invalid_argument("weft::thread_pool: pool_options::threads = " + std::to_string(opts.threads) +
                                " is more than the supported 4096");
  if (opts.priorities < 1 || opts.priorities > 16)
    throw std::invalid_argument("weft::thread_pool: pool_options::priorities must be in 1..16 (got " +
                                std::to_string(opts.priorities) + ")");
  if (opts.spins > k_max_spins)
    throw std::invalid_argument("weft::thread_pool: pool_options::spins must be in 0.." + std::to_string(k_max_spins) +
                                " (got " + std::to_string(opts.spins) + ")");
  m_workers.reserve(opts.threads);
  for (unsigned i = 0; i < opts.threads; ++i) m_workers.push_back(std::make_unique<worker>(*this, i, opts.priorities));
  m_work_words = (m_workers.size() + 63) / 64;
  m_work_bits = std::make_unique<std::atomic<std::uint64_t>[]>(m_work_words);
  m_unasked_bits = std::make_unique<std::atomic<std::uint64_t>[]>(m_work_words);
  for (std::size_t i = 0; i < m_work_words; ++i) {
    m_work_bits[i].store(0, std::memory_order_relaxed);
    // No worker has been asked yet: every bit set (the last word only up to the count).
    const std::size_t in_word = std::min<std::size_t>(64, m_workers.size() - i * 64);
    m_unasked_bits[i].store(in_word == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << in_word) - 1,
                            std::memory_order_relaxed);
  }
  if (!reactors.empty()) {
    if (reactors.size() != opts.threads)
      throw std::invalid_argument("weft::thread_pool: one reactor per worker is needed");
    for (unsigned i = 0; i < opts.threads; ++i) m_workers[i]->m_reactor = reactors[i];
  }
  compute_steal_orders(*this);
  m_max_searchers = std::max<std::size_t>(1, std::min(m_workers.size() / 2, available_cpu_count()));
}

pool_impl::~pool_impl() = default;

void pool_impl::start() {
  m_started_ns = steady_ns();
  try {
    for (auto& w : m_workers) w->m_thread = std::thread([p = w.get()] { p->run(); });
  } catch (...) {
    stop();
    throw;
  }
}

worker* pool_impl::current_worker() const noexcept {
  worker_context* w = t_worker;
  return w != nullptr && w->m_executor == &m_owner ? static_cast<worker*>(w) : nullptr;
}

void pool_impl::schedule(void* item, unsigned prio) {
  if (worker* w = current_worker()) {
    push_local(*w, prio, item, true);  // a wake-up or a post from inside: shared at once when asked
    return;
  }
  struct in_schedule {
    std::atomic<std::uint32_t>& count;
    explicit in_schedule(std::atomic<std::uint32_t>& c) : count(c) { count.fetch_add(1, std::memory_order_seq_cst); }
    ~in_schedule() { count.fetch_sub(1, std::memory_order_release); }  // pairs with the acquire in stop()
  } guard(m_schedulers);
  // seq_cst with the increment above, against stop()'s store and load: either we see
  // m_stopping, or stop() sees us and waits until we are done.
  if (m_stopping.load(std::memory_order_seq_cst))
    throw shutdown_error("weft::thread_pool: cannot queue work, the pool is shutting down");
  // Prefer a parked worker: give it the work directly and wake it.
  if ((m_idle.load(std::memory_order_relaxed) & k_sleepers_mask) != 0) {
    std::lock_guard lock(m_idle_mutex);
    if (!m_sleeping.empty()) {
      worker* w = m_sleeping.back();
      m_sleeping.pop_back();
      w->m_inbox.push(prio, item);
      mark_work(w->m_index);
      m_idle.fetch_add(k_searching_one - 1, std::memory_order_seq_cst);
      w->m_futex.store(1, std::memory_order_release);
      w->wake_up();
      return;
    }
  }
  const unsigned i = m_next_inbox.fetch_add(1, std::memory_order_relaxed) % m_workers.size();
  m_workers[i]->m_inbox.push(prio, item);
  mark_work(i);
  notify_external();
  if (prio + 1 < m_opts.priorities) announce_urgent(prio);
}

void pool_impl::announce_urgent(unsigned prio) noexcept {
  // Workers running lower-priority work notice at their next join (fork.hpp's
  // slow_suspend) or when their current chain ends (take_local).
  for (auto& w : m_workers) lower_inline_limit(*w, prio + 1);
}

}  // namespace weft::detail

namespace weft {

void check_priority(const executor& ex, unsigned prio, const char* what) {
  if (prio >= ex.priorities())
    throw std::out_of_range(std::string(what) + ": priority " + std::to_string(prio) + " is out of range [0, " +
                            std::to_string(ex.priorities()) + ")");
}

thread_pool::thread_pool(pool_options options) : m_impl(std::make_unique<detail::pool_impl>(*this, options)) {
  m_impl->start();
}

thread_pool::thread_pool(pool_options options, std::span<detail::worker_reactor* const> reactors)
    : m_impl(std::make_unique<detail::pool_impl>(*this, options, reactors)) {
  m_impl->start();
}

thread_pool::~thread_pool() {
  if (m_impl->current_worker() != nullptr) {
    std::fputs("weft: a thread_pool was destroyed from one of its own worker threads; aborting\n", stderr);
    std::abort();
  }
  m_impl->stop();
}

void thread_pool::schedule(std::coroutine_handle<> h, unsigned prio) {
  check_priority(*this, prio, "weft::thread_pool::schedule");
  m_impl->schedule(h.address(), prio);
}

unsigned thread_pool::priorities() const noexcept { return m_impl->m_opts.priorities; }

bool thread_pool::owns_current_thread() const noexcept { return m_impl->current_worker() != nullptr; }

void thread_pool::before_blocking() noexcept {
  if (detail::worker* w = m_impl->current_worker()) {
    bool shared = false;
    for (unsigned p = 0; p < w->m_prios; ++p) shared |= w->m_deques[p].share_all();
    m_impl->mark_unasked(w->m_index);  // share_all() cleared the share requests
    if (shared) {
      m_impl->mark_work(w->m_index);
      m_impl->wake_one();
    }
  }
}

std::size_t thread_pool::thread_count() const noexcept { return m_impl->m_workers.size(); }

thread_pool& default_pool() {
  static thread_pool pool{pool_options{}};
  return pool;
}

}  // namespace weft
