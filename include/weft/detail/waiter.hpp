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
#pragma once

#include <coroutine>
#include <cstdio>
#include <exception>

#include "weft/executor.hpp"
#include "weft/sync_wait.hpp"

namespace weft::detail {

/// One suspended coroutine or blocked thread. Not thread-safe: guarded by the lock of
/// the primitive whose list holds it.
struct waiter {
  waiter* m_next = nullptr;
  std::coroutine_handle<> m_handle;
  executor* m_executor = nullptr;
  sync_signal* m_signal = nullptr;  // a blocked plain thread, instead of m_handle
  unsigned m_prio = 0;

  /// Records the suspending coroutine and where it runs now.
  void park(std::coroutine_handle<> h) noexcept {
    m_handle = h;
    m_executor = current_executor();
    m_prio = current_priority();
  }
  /// Records a thread that will block on `s`.
  void park(sync_signal& s) noexcept { m_signal = &s; }

  /// Resumes the waiter (see the file comment). The node may be gone when this returns.
  void wake() noexcept {
    if (sync_signal* s = m_signal) {
      s->notify();
      return;
    }
    const std::coroutine_handle<> h = m_handle;
    executor* const ex = m_executor;
    if (ex == nullptr) {
      h.resume();
      return;
    }
    try {
      ex->schedule(h, m_prio);
    } catch (...) {
      // The waiter's executor is gone or stopping: nothing can run it any more.
      std::fputs("weft: a woken waiter's executor no longer accepts work (destroy executors only after "
                 "nothing waits on their channels or locks); terminating\n",
                 stderr);
      std::terminate();
    }
  }
};

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

  void push_back(waiter* w) noexcept {
    w->m_next = nullptr;
    if (m_tail != nullptr) m_tail->m_next = w;
    else m_head = w;
    m_tail = w;
    ++m_size;
  }
  /// The oldest waiter, unlinked; nullptr when empty.
  waiter* pop_front() noexcept {
    waiter* w = m_head;
    if (w != nullptr) {
      m_head = w->m_next;
      if (m_head == nullptr) m_tail = nullptr;
      --m_size;
    }
    return w;
  }
  /// Unlinks `w` if it is in the list; true if it was.
  bool remove(waiter* w) noexcept {
    waiter* prev = nullptr;
    for (waiter* p = m_head; p != nullptr; prev = p, p = p->m_next) {
      if (p != w) continue;
      (prev != nullptr ? prev->m_next : m_head) = p->m_next;
      if (m_tail == p) m_tail = prev;
      --m_size;
      return true;
    }
    return false;
  }
  /// Unlinks every waiter; returns the first of the chain (linked through m_next).
  waiter* take_all() noexcept {
    waiter* w = m_head;
    m_head = m_tail = nullptr;
    m_size = 0;
    return w;
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

/// The awaiter of a primitive whose waiters queue FIFO and resume with nothing to
/// return (events, latch, semaphore). `Owner` provides, reachable from here (public or
/// by friendship): `bool try_now()`, which may take what the waiter waits for, and
/// `bool park(waiter&)`, which under the owner's lock queues the node, or returns false
/// when there is no need to wait after all. Used once by its co_await, on the awaiting
/// thread (the coroutine protocol; not thread-safe itself, the owner is).
template <class Owner>
class park_awaiter {
 public:
  explicit park_awaiter(Owner& owner) noexcept : m_owner(&owner) {}
  bool await_ready() noexcept { return m_owner->try_now(); }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    m_node.park(h);
    return m_owner->park(m_node);
  }
  void await_resume() const noexcept {}

 private:
  Owner* m_owner;
  waiter m_node;
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
