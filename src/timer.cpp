// src/timer.cpp: timer_queue, the process-wide timer thread, and where timer_add arms a
// deadline (protocol at the top of weft/detail/timer.hpp).
#include "weft/detail/timer.hpp"

#include "pool_impl.hpp"
#include "weft/detail/reactor.hpp"
#include "weft/detail/waiter.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>
#include <utility>

namespace weft::detail {

// ---- timer_queue ------------------------------------------------------------------------

bool timer_queue::add(timer_entry& e) {
  std::lock_guard lock(m_mutex);
  link(e);
  return e.m_index == 0;
}

void timer_queue::link(timer_entry& e) {
  m_heap.push_back(&e);  // the only allocation (amortised), before anything changes
  e.m_fired = false;
  e.m_queue.store(this, std::memory_order_relaxed);
  place(m_heap.size() - 1, &e);
  sift_up(e.m_index);
  // seq_cst: an earlier deadline, against the timer thread's m_until (timer_thread::earlier).
  publish_earliest(std::memory_order_seq_cst);
}

void timer_queue::remove(timer_entry& e) noexcept {
  // The queue may hand the entry to another one meanwhile (hand_over): the one that
  // holds it is the one read under its own lock.
  for (;;) {
    timer_queue* const q = e.m_queue.load(std::memory_order_acquire);
    std::unique_lock lock(q->m_mutex);
    if (e.m_queue.load(std::memory_order_relaxed) != q) continue;
    if (e.m_index != timer_entry::k_unlinked) {
      q->unlink(e);
      q->publish_earliest();
      return;
    }
    ++q->m_removers;
    q->m_returned.wait(lock, [&] { return q->m_firing != &e; });
    --q->m_removers;
    return;
  }
}

void timer_queue::unlink(timer_entry& e) noexcept {
  const std::size_t i = e.m_index;
  e.m_index = timer_entry::k_unlinked;
  timer_entry* const last = m_heap.back();
  m_heap.pop_back();
  if (last == &e) return;
  place(i, last);
  sift_up(i);
  sift_down(last->m_index);
}

timer_queue::time_point timer_queue::fire_due(time_point now) noexcept {
  // A stop that wakes a waiter whose executor refuses work (it shuts down) must not
  // end the process from here: the waiter is resumed on this thread instead, after the
  // entry's function returned (outside the stop callbacks, and with m_firing cleared,
  // so that it may remove its own entry).
  refused_wakes refused;
  refused_wakes* const outer = std::exchange(t_refused_wakes, &refused);
  std::unique_lock lock(m_mutex);
  if (m_firer) {  // another thread fires this queue now: it takes what is due
    t_refused_wakes = outer;
    return m_heap.empty() ? time_point::max() : m_heap.front()->m_when;
  }
  m_firer = true;
  while (!m_heap.empty() && m_heap.front()->m_when <= now) {
    timer_entry* const e = m_heap.front();
    unlink(*e);
    publish_earliest();
    m_firing = e;
    e->m_fired = true;
    lock.unlock();
    e->m_fn(*e);
    lock.lock();
    m_firing = nullptr;
    if (m_removers != 0) m_returned.notify_all();
    if (refused.m_first != nullptr) {
      lock.unlock();
      resume_refused(refused);
      lock.lock();
    }
  }
  m_firer = false;
  t_refused_wakes = outer;
  return m_heap.empty() ? time_point::max() : m_heap.front()->m_when;
}

void timer_queue::sift_up(std::size_t i) noexcept {
  timer_entry* const e = m_heap[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!(e->m_when < m_heap[parent]->m_when)) break;
    place(i, m_heap[parent]);
    i = parent;
  }
  place(i, e);
}

void timer_queue::sift_down(std::size_t i) noexcept {
  const std::size_t n = m_heap.size();
  timer_entry* const e = m_heap[i];
  for (;;) {
    std::size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && m_heap[child + 1]->m_when < m_heap[child]->m_when) ++child;
    if (!(m_heap[child]->m_when < e->m_when)) break;
    place(i, m_heap[child]);
    i = child;
  }
  place(i, e);
}

void timer_queue::publish_earliest(std::memory_order order) noexcept {
  const time_point first = m_heap.empty() ? time_point::max() : m_heap.front()->m_when;
  m_earliest.store(first.time_since_epoch().count(), order);
}

// ---- the timer thread -------------------------------------------------------------------

namespace {

// How long a deadline in a watched queue (an io_pool worker's) may be overdue before the
// timer thread fires it in the worker's stead: the worker fires its own as it polls,
// and one that computes without awaiting polls late (weft/detail/timer.hpp).
// 5 ms: well past a loaded worker's wake-up from its parked wait (which fires its own
// deadlines), short against any deadline worth setting.
constexpr auto k_grace = std::chrono::milliseconds(5);

/// t + k_grace, saturating at time_point::max() (a deadline "never").
timer_queue::time_point plus_grace(timer_queue::time_point t) noexcept {
  return t >= timer_queue::time_point::max() - k_grace ? timer_queue::time_point::max() : t + k_grace;
}

class timer_thread {
 public:
  using time_point = timer_queue::time_point;

  void add(timer_entry& e) {
    if (!m_started.load(std::memory_order_acquire)) start();
    if (m_queue.add(e)) earlier(e.m_when);
  }

  /// A watched queue's earliest deadline moved earlier, to `when` (published already).
  void earlier(time_point when) {
    if (!m_started.load(std::memory_order_acquire)) start();
    // seq_cst, against run()'s store of m_until and its reading of every queue's
    // earliest after it: either this sees the thread's new m_until, or the thread sees
    // the new deadline before it sleeps.
    if (when < time_point(time_point::duration(m_until.load()))) kick();
  }

  /// Takes over `e` from a queue that ends (timer_queue::hand_over, under that queue's
  /// lock): allocation failure there has nowhere to go but here.
  void adopt(timer_entry& e) noexcept {
    try {
      add(e);
    } catch (...) {
      std::fputs("weft: a deadline could not be handed to the timer thread\n", stderr);
      std::terminate();
    }
  }

  void watch(timer_queue& q) {
    std::lock_guard lock(m_mutex);
    m_watched.push_back(&q);
    m_scan.reserve(m_watched.size());  // run() copies the list without allocating
  }

  void unwatch(timer_queue& q) noexcept {
    std::unique_lock lock(m_mutex);
    std::erase(m_watched, &q);
    m_left.wait(lock, [&] { return m_visiting != &q; });  // the thread may be firing it
  }

 private:
  void start() {
    std::lock_guard lock(m_mutex);
    if (m_thread.joinable()) return;
    m_thread = std::thread([this] { run(); });
    m_started.store(true, std::memory_order_release);
  }

  void kick() {
    {
      std::lock_guard lock(m_mutex);
      m_kicked = true;
    }
    m_wake.notify_one();
  }

  /// When the thread must look again: its own earliest, and each watched queue's
  /// earliest plus the grace. Under m_mutex.
  time_point next_look(time_point own) const noexcept {
    time_point next = std::min(own, m_queue.earliest());
    for (timer_queue* q : m_watched) {
      next = std::min(next, plus_grace(q->earliest()));
    }
    return next;
  }

  void run() {
    for (;;) {
      const time_point now = std::chrono::steady_clock::now();
      time_point next = m_queue.fire_due(now);
      {
        std::unique_lock lock(m_mutex);
        m_scan.assign(m_watched.begin(), m_watched.end());
      }
      for (timer_queue* q : m_scan) {
        if (plus_grace(q->earliest()) > now) continue;
        {
          std::lock_guard lock(m_mutex);
          if (std::find(m_watched.begin(), m_watched.end(), q) == m_watched.end()) continue;  // unwatched meanwhile
          m_visiting = q;
        }
        q->fire_due(now);  // returns at once when its worker is firing it right now
        {
          std::lock_guard lock(m_mutex);
          m_visiting = nullptr;
        }
        m_left.notify_all();
      }
      std::unique_lock lock(m_mutex);
      m_until.store(next_look(next).time_since_epoch().count());
      next = next_look(next);  // after the store: see earlier()
      m_until.store(next.time_since_epoch().count());
      if (!m_kicked) {
        if (next == time_point::max()) {
          m_wake.wait(lock, [&] { return m_kicked; });
        } else {
          m_wake.wait_until(lock, next, [&] { return m_kicked; });
        }
      }
      m_kicked = false;
      m_until.store(time_point::min().time_since_epoch().count());  // awake: it looks again anyway
    }
  }

  timer_queue m_queue;  // the deadlines of threads that are no io_pool worker
  std::atomic<bool> m_started{false};
  std::mutex m_mutex;                   // guards the members below, and the thread's start
  std::condition_variable m_wake;       // a deadline earlier than m_until
  std::condition_variable m_left;       // m_visiting cleared
  std::vector<timer_queue*> m_watched;  // the io_pool workers' queues
  std::vector<timer_queue*> m_scan;     // run()'s copy of m_watched
  timer_queue* m_visiting = nullptr;    // the watched queue run() fires now
  bool m_kicked = false;
  std::atomic<time_point::rep> m_until{time_point::min().time_since_epoch().count()};  // what the thread sleeps until
  std::thread m_thread;
};

// Never destroyed: deadlines may be removed during static destruction (a pool stopped
// at exit still finishing a task under a deadline); the thread ends with the process.
timer_thread& the_timer() {
  static timer_thread* const t = new timer_thread;
  return *t;
}

}  // namespace

void timer_queue::hand_over() noexcept {
  std::lock_guard lock(m_mutex);
  while (!m_heap.empty()) {
    timer_entry* const e = m_heap.back();
    m_heap.pop_back();
    e->m_index = timer_entry::k_unlinked;
    // Linked there before this lock is released: a remove() that comes meanwhile
    // waits here, then finds the entry's new queue.
    the_timer().adopt(*e);
  }
  publish_earliest();
}

void timer_add(timer_entry& e) {
  if (worker_context* const w = fiber_safe_worker()) {
    if (worker_reactor* const r = static_cast<worker*>(w)->m_reactor) {
      if (timer_queue* const q = r->deadlines()) {
        // This thread polls q: its next poll, or its parked wait, sees the deadline;
        // the timer thread only watches for one that this worker is too busy to fire.
        if (q->add(e)) the_timer().earlier(plus_grace(e.m_when));
        return;
      }
    }
  }
  the_timer().add(e);
}

void timer_watch(timer_queue& q) { the_timer().watch(q); }
void timer_unwatch(timer_queue& q) noexcept { the_timer().unwatch(q); }

}  // namespace weft::detail
