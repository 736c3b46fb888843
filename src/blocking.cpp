// src/blocking.cpp: blocking_pool, the threads under weft::spawn_blocking
// (weft/blocking.hpp).
#include "weft/blocking.hpp"

#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

namespace weft {

// Owned by the pool and by each of its threads: the destructor waits until no thread
// runs any more, but the last one still unlocks the mutex after telling it so.
struct blocking_pool::state {
  explicit state(const blocking_options& o) : m_options(o) {}

  void run_thread() noexcept;

  const blocking_options m_options;
  std::mutex m_mutex;
  std::condition_variable m_work;     // a job was queued, or the pool is being destroyed
  std::condition_variable m_all_out;  // the last thread is leaving
  detail::blocking_job* m_head = nullptr;
  detail::blocking_job* m_tail = nullptr;
  std::size_t m_queued = 0;
  std::size_t m_threads = 0;
  std::size_t m_idle = 0;  // threads waiting on m_work
  bool m_closing = false;
};

blocking_pool::blocking_pool(blocking_options options) : m_options(options) {
  if (m_options.max_threads == 0) throw std::invalid_argument("weft::blocking_pool: max_threads must be at least 1");
  m_state = std::make_shared<state>(m_options);
}

blocking_pool::~blocking_pool() {
  state& st = *m_state;
  std::unique_lock lock(st.m_mutex);
  st.m_closing = true;  // refuses new calls; the threads run what is queued, then exit
  st.m_work.notify_all();
  st.m_all_out.wait(lock, [&] { return st.m_threads == 0; });
}

std::size_t blocking_pool::thread_count() const {
  std::lock_guard lock(m_state->m_mutex);
  return m_state->m_threads;
}

std::size_t blocking_pool::queued() const {
  std::lock_guard lock(m_state->m_mutex);
  return m_state->m_queued;
}

void blocking_pool::submit(detail::blocking_job& job) {
  state& st = *m_state;
  std::unique_lock lock(st.m_mutex);
  if (st.m_closing) throw blocking_rejected("weft::spawn_blocking: the blocking_pool is being destroyed");
  // Calls beyond the idle threads wait in the queue; a thread is started for each such
  // call while there is room for threads, and max_queued may wait beyond that.
  const bool start = st.m_queued + 1 > st.m_idle && st.m_threads < m_options.max_threads;
  if (!start && st.m_queued >= st.m_idle + m_options.max_queued) {
    throw blocking_rejected("weft::spawn_blocking: " + std::to_string(st.m_queued) + " calls wait for the " +
                            std::to_string(st.m_threads) +
                            " busy threads of the blocking_pool (blocking_options::max_queued, max_threads)");
  }
  if (start) {
    try {
      std::thread([keep = m_state] { keep->run_thread(); }).detach();
      ++st.m_threads;
    } catch (const std::system_error&) {
      if (st.m_threads == 0) throw;  // nobody would ever run it
      // No thread to be had now: the call waits for a running one.
    }
  }
  job.m_next = nullptr;
  if (st.m_tail != nullptr) {
    st.m_tail->m_next = &job;
  } else {
    st.m_head = &job;
  }
  st.m_tail = &job;
  ++st.m_queued;
  if (st.m_idle != 0) st.m_work.notify_one();
}

bool blocking_pool::withdraw(detail::blocking_job& job) noexcept {
  state& st = *m_state;
  std::lock_guard lock(st.m_mutex);
  detail::blocking_job* prev = nullptr;
  for (detail::blocking_job* j = st.m_head; j != nullptr; prev = j, j = j->m_next) {
    if (j != &job) continue;
    (prev != nullptr ? prev->m_next : st.m_head) = j->m_next;
    if (st.m_tail == j) st.m_tail = prev;
    --st.m_queued;
    return true;
  }
  return false;
}

void blocking_pool::state::run_thread() noexcept {
  std::unique_lock lock(m_mutex);
  for (;;) {
    if (m_head != nullptr) {
      detail::blocking_job* const job = m_head;
      m_head = job->m_next;
      if (m_head == nullptr) m_tail = nullptr;
      --m_queued;
      lock.unlock();
      job->m_run(*job);  // the job's frame may be gone once this returns
      lock.lock();
      continue;
    }
    if (m_closing) break;
    ++m_idle;
    const bool woke = m_work.wait_for(lock, m_options.keep_alive, [&] { return m_head != nullptr || m_closing; });
    --m_idle;
    if (!woke) break;  // idle for keep_alive: this thread goes
  }
  if (--m_threads == 0) m_all_out.notify_all();
}

blocking_pool& default_blocking_pool() {
  // Never destroyed: tasks may make blocking calls during static destruction.
  static blocking_pool* const p = new blocking_pool;
  return *p;
}

}  // namespace weft
