// src/timer.cpp: the deadline thread (protocol at the top of weft/detail/timer.hpp).
#include "weft/detail/timer.hpp"

#include "weft/detail/waiter.hpp"

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

namespace weft::detail {

namespace {

class timer_thread {
 public:
  void add(timer_entry& e) {
    std::unique_lock lock(m_mutex);
    if (!m_thread.joinable()) m_thread = std::thread([this] { run(); });
    e.m_seq = ++m_seq;
    e.m_fired = false;
    const bool earliest = m_entries.empty() || key(e) < *m_entries.begin();
    m_entries.insert(key(e));
    if (earliest) m_wake.notify_one();
  }

  void remove(timer_entry& e) noexcept {
    std::unique_lock lock(m_mutex);
    if (m_entries.erase(key(e)) != 0) return;
    while (m_firing == &e) m_fired.wait(lock);  // its function is running: wait for it
  }

 private:
  using entry_key = std::pair<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>, timer_entry*>;
  static entry_key key(timer_entry& e) { return {{e.m_when, e.m_seq}, &e}; }

  void run() {
    // A stop that wakes a waiter whose executor refuses work (it shuts down) must not
    // end the process from here: the waiter is resumed on this thread instead, after
    // the entry's function returned (outside the stop callbacks, and with m_firing
    // cleared, so that it may remove its own entry).
    refused_wakes refused;
    t_refused_wakes = &refused;
    std::unique_lock lock(m_mutex);
    for (;;) {
      if (m_entries.empty()) {
        m_wake.wait(lock);
        continue;
      }
      const auto first = m_entries.begin();
      if (std::chrono::steady_clock::now() < first->first.first) {
        m_wake.wait_until(lock, first->first.first);
        continue;
      }
      timer_entry* e = first->second;
      m_entries.erase(first);
      m_firing = e;
      e->m_fired = true;
      lock.unlock();
      e->m_fn(*e);
      lock.lock();
      m_firing = nullptr;
      m_fired.notify_all();
      if (refused.m_first != nullptr) {
        lock.unlock();
        resume_refused(refused);
        lock.lock();
      }
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_wake;   // a new earliest deadline, or stopping
  std::condition_variable m_fired;  // an entry's function returned
  std::set<entry_key> m_entries;
  timer_entry* m_firing = nullptr;
  std::uint64_t m_seq = 0;
  std::thread m_thread;
};

// Never destroyed: deadlines may be removed during static destruction (a pool stopped
// at exit still finishing a task under a deadline); the thread ends with the process.
timer_thread& the_timer() {
  static timer_thread* const t = new timer_thread;
  return *t;
}

}  // namespace

void timer_add(timer_entry& e) { the_timer().add(e); }
void timer_remove(timer_entry& e) noexcept { the_timer().remove(e); }

}  // namespace weft::detail
