// weft/detail/waiter.hpp: how channels and sync primitives park and wake their
// waiters. Not API.
//
// A waiter is an intrusive node that lives in the suspended party: the awaiter inside
// a coroutine frame, or the stack of a blocked plain thread. A primitive keeps its
// waiters in FIFO lists under its own lock; the waker unlinks a node and fills in its
// result under that lock, and wakes it only after unlocking. Waking is the last touch
// of the node: the woken party may destroy it at once.
//
// Where a woken coroutine runs: it is handed to the executor it suspended on, at the
// priority it ran at. On a weft::thread_pool, a wake from one of the pool's own workers
// queues it on that worker's own deque, so it runs on the waker's thread as soon as that
// thread has nothing else to do, unless an idle worker steals it first (the "next task"
// rule); a wake from anywhere else posts it to its pool. A coroutine that suspended
// outside any executor (resumed by hand on a plain thread) is resumed inline by the
// waker, after the primitive's lock is released.
//
// Stopping a wait (weft/stop.hpp). A coroutine that suspends under a stop token that
// can be stopped registers a std::stop_callback before its node is published. The node
// has a state, guarded by the primitive's lock like the lists: idle (not parked yet),
// queued, done (served, or settled without waiting), stopped. Under that lock:
//   - the primitive's park() refuses a node already stopped (begin_park), and marks the
//     others done before it settles them or queues them (queued);
//   - serving a waiter (pop_front, take_all) marks it done;
//   - the callback (on the thread that requests the stop) marks an idle node stopped,
//     so its park() will refuse it, or unlinks a queued one, marks it stopped and wakes
//     it after unlocking; a done node is left alone: it got what it waited for.
// The woken coroutine first unregisters the callback (which waits for a callback
// running on another thread to return), then reads the state: stopped means it never
// got what it waited for, and the awaiter reports that in its documented way. So a wait
// either completes or is stopped, never both, never neither.
#pragma once

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <stop_token>

#include "weft/executor.hpp"
#include "weft/stop.hpp"
#include "weft/sync_wait.hpp"

namespace weft::detail {

/// Where a waiter stands in the stop protocol (see the file comment).
enum class wait_state : std::uint8_t { idle, queued, done, stopped };

struct waiter;

/// Wake-ups that an executor refused (it shuts down), kept by a thread that resumes
/// them itself once it is outside any stop callback: the timer thread
/// (weft/detail/timer.hpp), which must not end the process because a deadline fired
/// while a pool finished its last work. Linked through waiter::m_next. Not thread-safe:
/// one per thread.
struct refused_wakes {
  waiter* m_first = nullptr;
  waiter* m_last = nullptr;
};

/// The calling thread's refused_wakes, or null where a refused wake-up terminates.
inline thread_local refused_wakes* t_refused_wakes = nullptr;

/// One suspended coroutine or blocked thread. Not thread-safe: guarded by the lock of
/// the primitive whose list holds it.
///
/// The fields are set by park(), not at construction: an awaiter holds its node whether
/// or not it suspends, and most awaits of a busy channel never do. Copying a node that
/// was not parked (awaiters are copied before they are awaited) gives another such node.
struct waiter {
  waiter* m_next;
  waiter* m_prev;  // while queued
  void* m_frame;   // the suspended coroutine (its address: no constructor to run)
  executor* m_executor;
  sync_signal* m_signal;  // a blocked plain thread, instead of m_frame
  unsigned m_prio;
  wait_state m_state;

  waiter() noexcept {}               // NOLINT: set by park(), see above
  waiter(const waiter&) noexcept {}  // NOLINT: never copied once parked
  waiter& operator=(const waiter&) noexcept { return *this; }
  ~waiter() = default;

  /// First thing a primitive's park() does under its lock: false when a stop came first
  /// (do not wait, do not take anything); else marks the node done, and the primitive
  /// then settles it at once or queues it.
  bool begin_park() noexcept {
    if (m_state == wait_state::stopped) return false;
    m_state = wait_state::done;
    return true;
  }

  /// Records the suspending coroutine and where it runs now; the node starts idle.
  void park(std::coroutine_handle<> h) noexcept {
    m_frame = h.address();
    m_executor = current_executor();
    m_signal = nullptr;
    m_prio = current_priority();
    m_state = wait_state::idle;
  }
  /// Records a thread that will block on `s`; the node starts idle.
  void park(sync_signal& s) noexcept {
    m_signal = &s;
    m_state = wait_state::idle;
  }

  /// Resumes the waiter (see the file comment). The node may be gone when this returns.
  void wake() noexcept {
    if (sync_signal* s = m_signal) {
      s->notify();
      return;
    }
    const auto h = std::coroutine_handle<>::from_address(m_frame);
    executor* const ex = m_executor;
    if (ex == nullptr) {
      h.resume();
      return;
    }
    try {
      ex->schedule(h, m_prio);
    } catch (...) {
      if (refused_wakes* r = t_refused_wakes) {  // this thread resumes it later itself
        m_next = nullptr;
        (r->m_last != nullptr ? r->m_last->m_next : r->m_first) = this;
        r->m_last = this;
        return;
      }
      // The waiter's executor is gone or stopping: nothing can run it any more.
      std::fputs(
          "weft: a woken waiter's executor no longer accepts work (destroy executors only after "
          "nothing waits on their channels or locks); terminating\n",
          stderr);
      std::terminate();
    }
  }
};

/// Resumes, on the calling thread, every wake-up collected in `r` (also those refused
/// while it runs them), oldest first. Call outside any lock and stop callback.
inline void resume_refused(refused_wakes& r) noexcept {
  while (waiter* w = r.m_first) {
    r.m_first = w->m_next;
    if (r.m_first == nullptr) r.m_last = nullptr;
    std::coroutine_handle<>::from_address(w->m_frame).resume();  // the node may go here
  }
}

/// Blocks the calling plain thread on `s` (publishing local work first when called on
/// an executor's thread, which then cannot run anything else meanwhile).
inline void block_on(sync_signal& s) noexcept {
  if (executor* ex = current_executor()) ex->before_blocking();
  s.wait();
}

/// A FIFO of waiters. Not thread-safe (guarded by its owner's lock).
class waiter_list {
 public:
  bool empty() const noexcept { return m_head == nullptr; }
  std::size_t size() const noexcept { return m_size; }
  waiter* front() const noexcept { return m_head; }

  /// Queues `w` last (state queued).
  void push_back(waiter* w) noexcept {
    w->m_next = nullptr;
    w->m_prev = m_tail;
    w->m_state = wait_state::queued;
    if (m_tail != nullptr)
      m_tail->m_next = w;
    else
      m_head = w;
    m_tail = w;
    ++m_size;
  }
  /// The oldest waiter, unlinked and marked done; nullptr when empty.
  waiter* pop_front() noexcept {
    waiter* w = m_head;
    if (w != nullptr) {
      m_head = w->m_next;
      if (m_head != nullptr)
        m_head->m_prev = nullptr;
      else
        m_tail = nullptr;
      --m_size;
      w->m_state = wait_state::done;
    }
    return w;
  }
  /// Unlinks every waiter, marked done; returns the first of the chain (linked through
  /// m_next).
  waiter* take_all() noexcept {
    waiter* w = m_head;
    for (waiter* p = w; p != nullptr; p = p->m_next) p->m_state = wait_state::done;
    m_head = m_tail = nullptr;
    m_size = 0;
    return w;
  }
  /// The stop callback's step for `w`, whose list this is (or would be): marks an idle
  /// node stopped (its park() will refuse it); unlinks a queued one and marks it
  /// stopped, returning true (wake it after unlocking); leaves a done one alone.
  bool cancel(waiter& w) noexcept {
    if (w.m_state == wait_state::idle) {
      w.m_state = wait_state::stopped;
      return false;
    }
    if (w.m_state != wait_state::queued) return false;
    (w.m_prev != nullptr ? w.m_prev->m_next : m_head) = w.m_next;
    (w.m_next != nullptr ? w.m_next->m_prev : m_tail) = w.m_prev;
    --m_size;
    w.m_state = wait_state::stopped;
    return true;
  }

 private:
  waiter* m_head = nullptr;
  waiter* m_tail = nullptr;
  std::size_t m_size = 0;
};

/// Wakes every waiter of a chain from waiter_list::take_all(), oldest first.
inline void wake_chain(waiter* w) noexcept {
  while (w != nullptr) {
    waiter* next = w->m_next;  // read first: waking may destroy the node
    w->wake();
    w = next;
  }
}

/// Waiters collected under a lock, woken (oldest first) when this goes out of scope:
/// declare it before the lock guard, so that the wake-ups happen after unlocking, also
/// when the locked section throws. Not thread-safe.
class deferred_wakes {
 public:
  deferred_wakes() = default;
  deferred_wakes(const deferred_wakes&) = delete;
  deferred_wakes& operator=(const deferred_wakes&) = delete;
  ~deferred_wakes() { wake_chain(m_first); }

  void add(waiter* w) noexcept {
    w->m_next = nullptr;
    (m_last != nullptr ? m_last->m_next : m_first) = w;
    m_last = w;
  }

 private:
  waiter* m_first = nullptr;
  waiter* m_last = nullptr;
};

/// The stop callback of a parked waiter: `m_cancel` runs the primitive's side of the
/// stop protocol under its lock(s) (usually waiter_list::cancel) and returns true when
/// it unlinked the node, which is then woken here, after unlocking.
struct stop_waiter {
  void* m_owner;
  waiter* m_node;
  bool (*m_cancel)(void* owner, waiter& node) noexcept;
  void operator()() const noexcept {
    if (m_cancel(m_owner, *m_node)) m_node->wake();
  }
};

/// An awaiter's watch of the awaiting coroutine's token (see the file comment). Used by
/// one awaiter, on the awaiting thread.
class wait_stop {
  using callback = std::stop_callback<stop_waiter>;

 public:
  wait_stop() noexcept = default;
  /// Awaiters are copied and moved before they are awaited, never while armed: a copy
  /// starts unarmed.
  wait_stop(const wait_stop&) noexcept {}
  wait_stop& operator=(const wait_stop&) noexcept { return *this; }
  /// Unregisters a callback still armed (waiting for one running elsewhere): awaiters
  /// whose result a stop leaves as it is (channels) end the watch only here.
  ~wait_stop() {
    if (m_armed) [[unlikely]]
      (void)disarm(nullptr);
  }

  /// In await_suspend, before the node is published: watches the token of `h`, if it
  /// has one that can be stopped. When it is stopped already, the callback runs here.
  template <class Promise>
  void arm(std::coroutine_handle<Promise> h, void* owner, waiter& node,
           bool (*cancel)(void*, waiter&) noexcept) noexcept {
    const std::stop_token* t = awaiting_token(h);
    if (t != nullptr && t->stop_possible()) [[unlikely]]
      arm(*t, stop_waiter{owner, &node, cancel});
  }
  /// In await_resume: stops watching (waiting for a callback running elsewhere); true
  /// when the wait ended by the stop, not by the primitive.
  bool stopped(const waiter& node) noexcept {
    if (!m_armed) [[likely]]
      return false;
    return disarm(&node);
  }

 private:
  // Out of line, so that the awaits that never arm (no token, or no suspension: the
  // common case on a busy channel) keep their code small.
  WEFT_NOINLINE void arm(const std::stop_token& t, stop_waiter w) noexcept {
    ::new (static_cast<void*>(m_storage)) callback(t, w);
    m_armed = true;
  }
  WEFT_NOINLINE bool disarm(const waiter* node) noexcept {
    std::launder(reinterpret_cast<callback*>(m_storage))->~callback();
    m_armed = false;
    return node != nullptr && node->m_state == wait_state::stopped;
  }

  alignas(callback) unsigned char m_storage[sizeof(callback)];
  bool m_armed = false;
};

/// The stop callback's step for primitives with one lock and one waiter_list: `Owner`
/// provides `bool cancel_wait(waiter&) noexcept`.
template <class Owner>
bool cancel_owner_wait(void* owner, waiter& node) noexcept {
  return static_cast<Owner*>(owner)->cancel_wait(node);
}

/// The awaiter of a primitive whose waiters queue FIFO and resume with nothing to
/// return (events, latch, semaphore). `Owner` provides, reachable from here (public or
/// by friendship): `bool try_now()`, which may take what the waiter waits for;
/// `bool park(waiter&)`, which under the owner's lock starts with waiter::begin_park()
/// and queues the node, or returns false when there is no need to wait after all (or a
/// stop came first); and `bool cancel_wait(waiter&)`, the stop callback's step under
/// that lock (waiter_list::cancel). A stop of the awaiting task's token ends the wait
/// with weft::cancelled thrown from await_resume (nothing taken). Used once by its
/// co_await, on the awaiting thread (the coroutine protocol; not thread-safe itself, the
/// owner is).
template <class Owner>
class park_awaiter {
 public:
  explicit park_awaiter(Owner& owner) noexcept : m_owner(&owner) {}
  bool await_ready() noexcept { return m_owner->try_now(); }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    m_node.park(h);
    m_stop.arm(h, m_owner, m_node, &cancel_owner_wait<Owner>);
    return m_owner->park(m_node);
  }
  void await_resume() {
    if (m_stop.stopped(m_node)) throw cancelled();
  }

 private:
  Owner* m_owner;
  waiter m_node;
  wait_stop m_stop;
};

/// The same wait for a plain thread: blocks until the owner wakes it (at once when
/// try_now() succeeds or park() says there is no need to wait).
template <class Owner>
void park_blocking(Owner& owner) noexcept {
  if (owner.try_now()) return;
  sync_signal signal;
  waiter node;
  node.park(signal);
  if (owner.park(node)) block_on(signal);
}

}  // namespace weft::detail
