// weft/channel.hpp: weft::channel<T>, a multi-producer multi-consumer queue between
// tasks (on any weft executor) and plain threads.
//
// Protocol. Two short locks (detail::spin_lock): the producers' lock guards the push
// end of the element store (detail/segment_queue.hpp), the FIFO of suspended consumers
// and the closed flag; the consumers' lock guards the pull end and the FIFO of suspended
// producers (bounded channels). A push takes only the producers' lock and a pull only
// the consumers' lock on their fast paths, so one producer and one consumer on two
// threads do not share a lock; whoever needs both takes the consumers' lock first. Each
// operation has one linearization point, inside its lock, and exactly-once delivery
// follows:
//   - invariant: consumers wait only while the store is empty; producers wait only
//     while it holds `capacity` elements; both lists are FIFO;
//   - push (producers' lock): closed -> rejected (false); a consumer waits -> the
//     element is handed to the oldest one directly (it never finds the channel empty
//     again after waking); room -> stored; else -> try_push says full, push() parks the
//     producer, after taking both locks and checking again;
//   - pull (consumers' lock): an element -> taken; if a producer waits, the producers'
//     lock is taken too before the place is freed, and the producer's element takes it
//     (it resumes with true), so no later push overtakes a waiting one; empty and
//     closed -> end (nullopt); empty and open -> park the consumer, after taking both
//     locks and checking again;
//   - close (both locks): sets the flag once; waiting consumers get nullopt (the store
//     is empty whenever one waits); waiting producers get false: their push never
//     happened. A pull that finds the store empty under its lock after a close sees
//     every element pushed before it (the close took the producers' lock after them).
// So every element whose push returned true is delivered exactly once, and every
// element whose push returned false was never delivered. Wake-ups happen after the
// locks are released (detail/waiter.hpp: where a woken task runs).
//
// Why locks rather than a lock-free ring: the critical sections are a handful of
// instructions and never wake anyone, unlocking is a plain store, so an operation costs
// one locked instruction, as a fetch_add-based ring does; and locks give FIFO waiters,
// direct hand-off and a race-free close() for free. Why a lock per end: with a single
// lock, one producer and one consumer running at once on two threads would move its
// cache line between the cores on every operation; with one per end, each side's lock
// and counters stay on its own core and the store's elements cross once per cache line
// (bench/README.md, 'Channel': the figures, and a slow mode of the bounded case).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "weft/detail/segment_queue.hpp"
#include "weft/detail/spin_lock.hpp"
#include "weft/detail/waiter.hpp"
#include "weft/sync_wait.hpp"
#include "weft/task.hpp"

namespace weft {

/// What a non-blocking channel operation did (a plain value).
enum class channel_status : std::uint8_t {
  ok,      ///< the element was pushed / pulled
  full,    ///< try_push: a bounded channel holds `capacity` elements
  empty,   ///< try_pull: nothing to pull now, the channel is open
  closed,  ///< try_push: the channel is closed; try_pull: closed and drained
};

/// A multi-producer multi-consumer FIFO channel of T (see the protocol at the top of
/// weft/channel.hpp). Unbounded by default (memory follows the backlog), or bounded
/// with `capacity` elements, where push() suspends while full. Usable from tasks on
/// any weft executor (co_await push/pull) and from plain threads (push_wait/pull_wait)
/// at the same time. Every member function is thread-safe. A woken task resumes on the
/// executor it suspended on. Not copyable or movable: share it by reference or pointer.
/// Destroying a channel while anything still waits on it is a programming error;
/// elements still stored are destroyed with it.
template <class T>
class channel {
  static_assert(std::is_object_v<T> && !std::is_const_v<T> && std::is_nothrow_move_constructible_v<T>,
                "weft::channel<T>: T must be a non-const object type with a noexcept move constructor");

  struct pull_waiter : detail::waiter {
    std::optional<T> m_value;
  };
  struct push_waiter : detail::waiter {
    T* m_value = nullptr;
    bool m_ok = false;
  };

 public:
  /// The element type.
  using value_type = T;
  /// The capacity of an unbounded channel.
  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

  /// An open channel holding at most `capacity` elements (default: unbounded).
  /// Throws std::invalid_argument for capacity 0.
  explicit channel(std::size_t capacity = unbounded) : m_capacity(capacity) {
    if (capacity == 0) throw std::invalid_argument("weft::channel: capacity must be at least 1 (got 0)");
  }
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;
  /// Destroys the elements still stored. Nothing may wait on the channel any more.
  ~channel() = default;

  /// The capacity given at construction (channel::unbounded if none). Thread-safe.
  std::size_t capacity() const noexcept { return m_capacity; }

  /// Elements stored now (a snapshot). Thread-safe.
  std::size_t size() const noexcept { return m_items.size(); }

  /// True once close() was called. Thread-safe.
  bool closed() const noexcept {
    std::lock_guard lock(m_push_lock);
    return m_closed;
  }

  /// Closes the channel: every later push fails; consumers still get every element
  /// pushed before, then nullopt/closed. Wakes every waiting consumer (nullopt: the
  /// channel is empty whenever one waits) and every waiting producer (false: its
  /// element was not pushed). Idempotent. Thread-safe.
  void close() noexcept {
    detail::waiter* consumers;
    detail::waiter* producers;
    {
      std::lock_guard pull(m_pull_lock);  // the consumers' lock first, always
      std::lock_guard push(m_push_lock);
      if (m_closed) return;
      m_closed = true;
      consumers = m_consumers.take_all();  // m_value stays nullopt
      producers = m_producers.take_all();  // m_ok stays false
    }
    detail::wake_chain(consumers);
    detail::wake_chain(producers);
  }

  // ---- push ----------------------------------------------------------------------

  /// Pushes `v` if there is room now: ok, full (bounded, `capacity` elements stored) or
  /// closed. `v` is moved from only when the result is ok. Never blocks. Thread-safe.
  /// Throws what allocating a segment or constructing T throws (nothing pushed).
  template <class U = T>
    requires std::constructible_from<T, U&&>
  channel_status try_push(U&& v) {
    detail::waiter* woken = nullptr;
    {
      std::lock_guard lock(m_push_lock);
      if (m_closed) [[unlikely]]
        return channel_status::closed;
      if (!m_consumers.empty()) [[unlikely]] {
        auto* c = static_cast<pull_waiter*>(m_consumers.front());
        c->m_value.emplace(std::forward<U>(v));
        woken = m_consumers.pop_front();
      } else if (has_room()) [[likely]] {
        m_items.emplace_back(std::forward<U>(v));
      } else {
        return channel_status::full;
      }
    }
    if (woken != nullptr) woken->wake();
    return channel_status::ok;
  }

  /// Awaiter of push(): `co_await ch.push(v)` evaluates to true once pushed, false if
  /// the channel is (or gets) closed first. Holds the element until then. Used once by
  /// that co_await, on the awaiting thread (not thread-safe itself; the channel is).
  class push_awaiter {
   public:
    /// Tries the push without waiting (as try_push): true (no suspension) unless the
    /// channel is full. Throws what try_push throws (nothing pushed).
    bool await_ready() {
      const channel_status s = m_ch->try_push(std::move(m_value));
      m_node.m_ok = s == channel_status::ok;
      return s != channel_status::full;
    }
    /// Queues the awaiting coroutine `h` as a producer: true. False (resume at once) when
    /// a consumer, room or close() came meanwhile and the push was settled here, or its
    /// stop token is stopped. Throws what allocating a segment throws (nothing pushed).
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) {
      m_node.park(h);
      m_stop.arm(h, m_ch, m_node, &channel::cancel_push);
      return m_ch->park_producer(m_node, m_value);
    }
    /// True when the element was pushed; false when the channel was closed first, or
    /// the awaiting task's stop token was stopped first.
    /// (A stop leaves m_ok false; the stop callback never touches it, so the watch may
    /// end later, with the awaiter.)
    bool await_resume() const noexcept { return m_node.m_ok; }

   private:
    friend class channel;
    template <class U>
    push_awaiter(channel& ch, U&& v) : m_ch(&ch), m_value(std::forward<U>(v)) {}
    channel* m_ch;
    T m_value;
    push_waiter m_node;
    detail::wait_stop m_stop;
  };

  /// `co_await ch.push(v)`: pushes `v`, suspending while a bounded channel is full
  /// (waiting producers are served in FIFO order). True once pushed; false when the
  /// channel is closed before it could be, or the awaiting task's stop token is stopped
  /// while it waits (weft/stop.hpp; the channel stays open); the element is then
  /// dropped. Thread-safe.
  template <class U = T>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] push_awaiter push(U&& v) {
    return push_awaiter{*this, std::forward<U>(v)};
  }

  /// Blocking push for plain threads: like push(), but blocks the calling thread while
  /// the channel is full. On an executor's thread it blocks that worker (prefer
  /// co_await push there). Thread-safe.
  template <class U = T>
    requires std::constructible_from<T, U&&>
  bool push_wait(U&& v) {
    const channel_status s = try_push(std::forward<U>(v));  // moves from v only when ok
    if (s != channel_status::full) return s == channel_status::ok;
    T value(std::forward<U>(v));
    detail::sync_signal signal;
    push_waiter node;
    node.park(signal);
    if (!park_producer(node, value)) return node.m_ok;
    detail::block_on(signal);
    return node.m_ok;
  }

  /// Pushes elements from [first, first + n) in order while there is room; returns how
  /// many were pushed (fewer than n when the channel is full or closed). The producers'
  /// lock is taken once for the whole batch. Never blocks. Thread-safe.
  template <std::input_iterator It>
  std::size_t try_push_n(It first, std::size_t n) {
    detail::deferred_wakes woken;  // destroyed after the lock guard: wakes after unlocking
    std::size_t done = 0;
    std::lock_guard lock(m_push_lock);
    if (m_closed) return 0;
    for (; done < n; ++done, ++first) {
      if (!m_consumers.empty()) {
        static_cast<pull_waiter*>(m_consumers.front())->m_value.emplace(*first);
        woken.add(m_consumers.pop_front());
      } else if (has_room()) {
        m_items.emplace_back(*first);
      } else {
        break;
      }
    }
    return done;
  }

  /// Pushes every element of [first, first + n) in order, suspending while full.
  /// Returns how many were pushed (fewer than n only when the channel was closed).
  /// Elements of one push_n are contiguous in the channel only when no other producer
  /// pushes at the same time. Thread-safe; `first` must stay valid until it completes.
  /// A forward iterator: after a partial batch the rest is read from a copy of `first`.
  template <std::forward_iterator It>
  task<std::size_t> push_n(It first, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      const std::size_t k = try_push_n(first, n - done);
      done += k;
      std::advance(first, k);
      if (done == n) break;
      // Full (or closed): wait for room for one. The result is named first: g++-12.2
      // can lay out a frame wrongly around `if (co_await ...)` (README, requirements).
      const bool pushed = co_await push(*first);
      if (!pushed) break;
      ++done;
      ++first;
    }
    co_return done;
  }

  // ---- pull ----------------------------------------------------------------------

  /// Pulls the oldest element into `out` if there is one: ok, empty (open, nothing
  /// stored) or closed (closed and drained). Never blocks. Thread-safe.
  channel_status try_pull(T& out) {
    detail::waiter* woken = nullptr;
    {
      std::lock_guard lock(m_pull_lock);
      if (m_items.empty()) return m_closed ? channel_status::closed : channel_status::empty;
      woken = take_front_locked([&](T&& v) { out = std::move(v); });
    }
    if (woken != nullptr) woken->wake();
    return channel_status::ok;
  }

  /// Awaiter of pull(): `co_await ch.pull()` evaluates to the oldest element, or
  /// nullopt once the channel is closed and drained. Used once by that co_await, on the
  /// awaiting thread (not thread-safe itself; the channel is).
  class pull_awaiter {
   public:
    /// Takes the oldest element, or sees the end of a closed and drained channel, without
    /// waiting: true (no suspension) unless the channel is empty and open.
    bool await_ready() { return m_ch->pull_ready(m_node); }
    /// Queues the awaiting coroutine `h` as a consumer: true. False (resume at once) when
    /// an element or close() came meanwhile and was taken here, or its stop token is
    /// stopped.
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) {
      m_node.park(h);
      m_stop.arm(h, m_ch, m_node, &channel::cancel_pull);
      return m_ch->park_consumer(m_node);
    }
    /// The element pulled, or nullopt once the channel is closed and drained, or when
    /// the awaiting task's stop token was stopped first.
    /// (A stop leaves m_value empty; the stop callback never touches it, so the watch
    /// may end later, with the awaiter.)
    std::optional<T> await_resume() noexcept { return std::move(m_node.m_value); }

   private:
    friend class channel;
    explicit pull_awaiter(channel& ch) noexcept : m_ch(&ch) {}
    channel* m_ch;
    pull_waiter m_node;
    detail::wait_stop m_stop;
  };

  /// `co_await ch.pull()`: the oldest element, suspending while the channel is empty
  /// and open (waiting consumers are served in FIFO order); nullopt once it is closed
  /// and drained, or when the awaiting task's stop token is stopped while it waits
  /// (weft/stop.hpp; nothing is taken, the channel stays open). Thread-safe.
  [[nodiscard]] pull_awaiter pull() noexcept { return pull_awaiter{*this}; }

  /// Blocking pull for plain threads: like pull(), but blocks the calling thread while
  /// the channel is empty and open. On an executor's thread it blocks that worker
  /// (prefer co_await pull there). Thread-safe.
  std::optional<T> pull_wait() {
    detail::sync_signal signal;
    pull_waiter node;
    if (pull_ready(node)) return std::move(node.m_value);
    node.park(signal);
    if (park_consumer(node)) detail::block_on(signal);
    return std::move(node.m_value);
  }

  /// Pulls up to `max` elements, oldest first, to `out`; returns how many (0: empty or
  /// closed; closed() tells which). The consumers' lock is taken once for the whole
  /// batch (and the producers' lock too once a producer waits). Never blocks.
  /// Thread-safe.
  template <class OutIt>
    requires std::output_iterator<OutIt, T>
  std::size_t try_pull_n(OutIt out, std::size_t max) {
    detail::deferred_wakes woken;  // destroyed after the lock guards: wakes after unlocking
    std::size_t done = 0;
    std::lock_guard pull(m_pull_lock);
    std::unique_lock push(m_push_lock, std::defer_lock);  // taken once a producer waits
    for (; done < max && !m_items.empty(); ++done) {
      const auto to_out = [&](T&& v) {
        *out = std::move(v);
        ++out;
      };
      if (m_producers.empty()) {
        take_front(to_out);
        continue;
      }
      if (!push.owns_lock()) push.lock();
      if (detail::waiter* w = take_front_and_refill(to_out)) woken.add(w);
    }
    return done;
  }

  /// Waits until at least one element is there (or the channel is closed and
  /// drained), then pulls up to `max` of them to `out`. Returns how many; 0 only when
  /// the channel is closed and drained (or max == 0). Thread-safe; `out` must stay
  /// valid until it completes.
  template <class OutIt>
    requires std::output_iterator<OutIt, T>
  task<std::size_t> pull_n(OutIt out, std::size_t max) {
    if (max == 0) co_return 0;
    std::size_t done = try_pull_n(out, max);
    if (done != 0) co_return done;
    std::optional<T> first = co_await pull();
    if (!first) co_return 0;
    *out = std::move(*first);
    ++out;
    co_return 1 + try_pull_n(out, max - 1);
  }

 private:
  /// True when the store has room for one more element. The producers' lock.
  bool has_room() noexcept { return m_capacity == unbounded || !m_items.full(m_capacity); }

  /// The consumers' lock held, the store not empty, no producer waiting (or the
  /// producers' lock held too): hands the front element to `out` and pops it. If `out`
  /// throws, nothing changed.
  template <class Out>
  void take_front(Out&& out) {
    out(std::move(m_items.front()));
    m_items.pop_front();
  }

  /// Both locks held, the store not empty: take_front, then, if a producer waits, its
  /// element takes the freed place and the producer is returned, to be woken after
  /// unlocking. If there is no memory for the producer's element, that producer simply
  /// keeps waiting.
  template <class Out>
  detail::waiter* take_front_and_refill(Out&& out) {
    take_front(out);
    if (m_producers.empty()) [[likely]]
      return nullptr;
    auto* p = static_cast<push_waiter*>(m_producers.front());
    try {
      m_items.emplace_back(std::move(*p->m_value));  // nothrow move: only allocation can fail
    } catch (...) {
      return nullptr;
    }
    p->m_ok = true;
    return m_producers.pop_front();
  }

  /// The consumers' lock held, the store not empty: take_front, taking the producers'
  /// lock too when a producer waits (take_front_and_refill).
  template <class Out>
  detail::waiter* take_front_locked(Out&& out) {
    if (m_producers.empty()) [[likely]] {
      take_front(out);
      return nullptr;
    }
    std::lock_guard push(m_push_lock);
    return take_front_and_refill(out);
  }

  /// await_ready of a pull: takes an element or the end of the channel, or says wait.
  bool pull_ready(pull_waiter& node) {
    detail::waiter* woken = nullptr;
    {
      std::lock_guard lock(m_pull_lock);
      if (m_items.empty()) [[unlikely]]
        return m_closed;  // closed: node.m_value stays nullopt
      woken = take_front_locked([&](T&& v) noexcept { node.m_value.emplace(std::move(v)); });
    }
    if (woken != nullptr) [[unlikely]]
      woken->wake();
    return true;
  }

  /// Parks a consumer unless something arrived meanwhile: true when it must wait.
  bool park_consumer(pull_waiter& node) {
    detail::waiter* woken = nullptr;
    {
      std::lock_guard pull(m_pull_lock);
      if (!node.begin_park()) return false;  // stopped first: m_value stays empty
      const auto to_node = [&](T&& v) noexcept { node.m_value.emplace(std::move(v)); };
      if (!m_items.empty()) {
        woken = take_front_locked(to_node);
      } else {
        // Pushes hand elements to waiting consumers under the producers' lock: checked
        // again under it, the store stays empty until this consumer is queued.
        std::lock_guard push(m_push_lock);
        if (m_items.empty()) {
          if (m_closed) return false;
          m_consumers.push_back(&node);
          return true;
        }
        woken = take_front_and_refill(to_node);
      }
    }
    if (woken != nullptr) woken->wake();
    return false;
  }

  /// Pushes `value` for a producer that found the channel full, or parks it if it
  /// still is: true when it must wait (node.m_ok is set otherwise).
  bool park_producer(push_waiter& node, T& value) {
    detail::waiter* woken = nullptr;
    {
      // Both locks: the waiting producers' list is the consumers', and with both held
      // no pull can free a place between the check and the queueing.
      std::lock_guard pull(m_pull_lock);
      std::lock_guard push(m_push_lock);
      if (!node.begin_park() || m_closed) {  // stopped first, or closed: not pushed
        node.m_ok = false;
        return false;
      }
      if (!m_consumers.empty()) {  // a consumer came and went between the two locks
        static_cast<pull_waiter*>(m_consumers.front())->m_value.emplace(std::move(value));
        woken = m_consumers.pop_front();
      } else if (has_room()) {
        m_items.emplace_back(std::move(value));
      } else {
        node.m_value = &value;
        m_producers.push_back(&node);
        return true;
      }
      node.m_ok = true;
    }
    if (woken != nullptr) woken->wake();
    return false;
  }

  /// The stop callbacks' steps (detail/waiter.hpp), under both locks: that covers
  /// every path that settles or queues a waiter, whichever lock guards its list.
  static bool cancel_pull(void* self, detail::waiter& node) noexcept {
    auto* ch = static_cast<channel*>(self);
    std::lock_guard pull(ch->m_pull_lock);
    std::lock_guard push(ch->m_push_lock);
    return ch->m_consumers.cancel(node);
  }
  static bool cancel_push(void* self, detail::waiter& node) noexcept {
    auto* ch = static_cast<channel*>(self);
    std::lock_guard pull(ch->m_pull_lock);
    std::lock_guard push(ch->m_push_lock);
    return ch->m_producers.cancel(node);
  }

  // The consumers' side: its lock and what only it guards (the store's pull end has
  // cache lines of its own inside m_items).
  alignas(64) mutable detail::spin_lock m_pull_lock;
  detail::waiter_list m_producers;  // push_waiter, only while the store is full
  // The producers' side.
  alignas(64) mutable detail::spin_lock m_push_lock;
  bool m_closed = false;  // written holding both locks, read holding either
  const std::size_t m_capacity;
  detail::waiter_list m_consumers;  // pull_waiter, only while the store is empty
  detail::segment_queue<T> m_items;
};

}  // namespace weft
