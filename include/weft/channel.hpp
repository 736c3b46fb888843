// weft/channel.hpp: weft::channel<T>, a multi-producer multi-consumer queue between
// tasks (on any weft executor) and plain threads.
//
// Protocol. The elements live in a lock-free store: a ring of exactly `capacity` slots
// for a bounded channel (detail/mpmc_ring.hpp), a list of fixed-size blocks for an
// unbounded one (detail/mpmc_list.hpp). A push or a pull that neither finds the channel
// full or empty nor sees anybody parked is one claim (a CAS on the store's tail or
// head) and one publication, and takes no lock: producers never wait for consumers or
// the other way round, and a preempted thread never holds anything another one needs.
// Each operation's linearization point is its claim; every element is taken by exactly
// one claim, in the order of the pushes' claims (so FIFO per producer).
//
// Parking. One short lock (detail::spin_lock) guards the two FIFOs of parked parties
// (consumers of an empty channel, producers of a full one) and the elements handed back
// by a pull whose output threw. A party that must wait takes the lock, queues itself,
// publishes the count of its FIFO (seq_cst, then a fence) and tries again under the lock
// (serve()): if the store changed meanwhile it is served at once and does not suspend.
// A push, after publishing its element, reads the consumers' count (seq_cst), and a pull
// of a bounded channel, after freeing its slot, reads the producers' count: when not 0,
// it takes the lock and serves, oldest first: an element goes straight into the oldest
// parked consumer, a parked producer's element into the freed slot. The party that
// publishes and the party that parks each write, then read the other's word (the Dekker
// pattern): at least one of them sees the other, so no wake-up is lost. Fresh co_await
// pushes and pulls that see parked parties queue behind them (FIFO among waiters).
//
// Waiting before parking (bounded channels, co_await push and pull). Parking and being
// woken costs microseconds; a consumer running on another core frees a slot in
// nanoseconds. So a push that finds the ring full first watches the ring's pull count
// (pauses, reading only that counter): while it moves, the push waits until a batch of
// slots is free (a quarter of the capacity, at most 64) and tries again, so that
// producer and consumer work on different cache lines instead of trading each slot's;
// when the count stands still (no consumer is running: they may share this thread),
// one last try, then it parks. A pull that finds the ring empty does the same with the
// push count. A channel whose waits keep finding the other side idle stops waiting
// (every 64th time it looks again), so a producer and a consumer on one thread lose
// nothing to it.
//
// Close. close() sets the store's closed bit (every later push fails) and serves under
// the lock: parked producers get false (their push never happened); parked consumers
// get the elements still stored, then nullopt once the store is drained (pushes that
// claimed before the close are still written, then delivered). So every element whose
// push returned true is delivered exactly once, and every element whose push returned
// false was never delivered. Wake-ups happen after the lock is released
// (detail/waiter.hpp: where a woken task runs).
//
// bench/README.md, 'Channel', has the figures (and the design before this one, with a
// lock for each end, against which they were measured).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/detail/mpmc_list.hpp"
#include "weft/detail/mpmc_ring.hpp"
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
/// with `capacity` elements, where push() suspends while full; a bounded channel
/// allocates its `capacity` slots when it is made. Usable from tasks on any weft
/// executor (co_await push/pull) and from plain threads (push_wait/pull_wait) at the
/// same time. Every member function is thread-safe. A woken task resumes on the
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
  using store_status = detail::store_status;

 public:
  /// The element type.
  using value_type = T;
  /// The capacity of an unbounded channel.
  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();
  /// The largest capacity of a bounded channel (its slots are allocated up front).
  static constexpr std::size_t max_bounded_capacity = std::size_t{1} << 30;

  /// An open channel holding at most `capacity` elements (default: unbounded).
  /// Throws std::invalid_argument for capacity 0 or a bounded capacity above
  /// max_bounded_capacity, and std::bad_alloc when its slots (bounded) or first block
  /// (unbounded) cannot be allocated.
  explicit channel(std::size_t capacity = unbounded) : m_capacity(capacity) {
    if (capacity == 0) throw std::invalid_argument("weft::channel: capacity must be at least 1 (got 0)");
    if (capacity == unbounded) {
      m_list.emplace();
    } else if (capacity > max_bounded_capacity) {
      throw std::invalid_argument("weft::channel: a bounded capacity must be at most 2^30 (got " +
                                  std::to_string(capacity) + "); use channel::unbounded");
    } else {
      m_ring.emplace(capacity);
    }
  }
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;
  /// Destroys the elements still stored. Nothing may wait on the channel any more.
  ~channel() {
    for (returned* r = m_returned_first; r != nullptr;) delete std::exchange(r, r->m_next);
  }

  /// The capacity given at construction (channel::unbounded if none). Thread-safe.
  std::size_t capacity() const noexcept { return m_capacity; }

  /// Elements stored now (a snapshot). Thread-safe.
  std::size_t size() const noexcept {
    const std::size_t stored = bounded() ? m_ring->size() : m_list->size();
    return stored + m_returned_count.load(std::memory_order_relaxed);
  }

  /// True once close() was called. Thread-safe.
  bool closed() const noexcept { return bounded() ? m_ring->closed() : m_list->closed(); }

  /// Closes the channel: every later push fails; consumers still get every element
  /// pushed before, then nullopt/closed. Wakes every waiting producer (false: its
  /// element was not pushed) and every waiting consumer (the elements still stored,
  /// then nullopt). Idempotent. Thread-safe.
  void close() noexcept {
    detail::deferred_wakes woken;  // destroyed after the lock guard: wakes after unlocking
    std::lock_guard lock(m_lock);
    if (bounded())
      m_ring->close();
    else
      m_list->close();
    serve(woken, nullptr);
  }

  // ---- push ----------------------------------------------------------------------

  /// Pushes `v` if there is room now: ok, full (bounded, `capacity` elements stored) or
  /// closed. Never blocks. Thread-safe. `v` is moved from only when the result is ok,
  /// unless T is built from an rvalue `v` by a constructor that may throw (then it is
  /// built first, whatever the result: pass a T to keep it). Throws what building T or
  /// (unbounded) allocating a block throws; then nothing was pushed.
  template <class U = T>
    requires std::constructible_from<T, U&&>
  channel_status try_push(U&& v) {
    const store_status s = store_push(std::forward<U>(v));
    if (s == store_status::ok) [[likely]] {
      after_push();
      return channel_status::ok;
    }
    return s == store_status::closed ? channel_status::closed : channel_status::full;
  }

  /// Awaiter of push(): `co_await ch.push(v)` evaluates to true once pushed, false if
  /// the channel is (or gets) closed first. Holds the element until then. Used once by
  /// that co_await, on the awaiting thread (not thread-safe itself; the channel is).
  class push_awaiter {
   public:
    /// Tries the push without waiting (as try_push): true (no suspension) unless the
    /// channel is full or producers are parked already (then it queues behind them).
    /// Throws what try_push throws (nothing pushed).
    bool await_ready() {
      if (m_ch->m_waiting_producers.load(std::memory_order_relaxed) != 0) [[unlikely]]
        return false;
      channel_status s = m_ch->try_push(std::move(m_value));
      if (s == channel_status::full) [[unlikely]]
        s = m_ch->push_while_pulled(m_value);
      m_node.m_ok = s == channel_status::ok;
      return s != channel_status::full;
    }
    /// Queues the awaiting coroutine `h` as a producer: true. False (resume at once) when
    /// room or close() came meanwhile and the push was settled here, or its stop token
    /// is stopped.
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
    T value(std::forward<U>(v));
    if (m_waiting_producers.load(std::memory_order_relaxed) == 0) {
      const channel_status s = try_push(std::move(value));  // moves from value only when ok
      if (s != channel_status::full) return s == channel_status::ok;
    }
    detail::sync_signal signal;
    push_waiter node;
    node.park(signal);
    if (!park_producer(node, value)) return node.m_ok;
    detail::block_on(signal);
    return node.m_ok;
  }

  /// Pushes elements from [first, first + n) in order while there is room; returns how
  /// many were pushed (fewer than n when the channel is full or closed). Never blocks.
  /// Thread-safe.
  template <std::input_iterator It>
  std::size_t try_push_n(It first, std::size_t n) {
    std::size_t done = 0;
    for (; done < n; ++done, ++first)
      if (try_push(*first) != channel_status::ok) break;
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
  /// stored) or closed (closed and drained). Never blocks. Thread-safe. If assigning
  /// to `out` throws, the element goes back to the front of the channel (unless
  /// memory runs out right then) and the exception propagates.
  channel_status try_pull(T& out) {
    std::optional<T> got;
    const store_status s = pull_any(got);
    if (s != store_status::ok) return s == store_status::closed ? channel_status::closed : channel_status::empty;
    deliver(out, std::move(*got));
    return channel_status::ok;
  }

  /// Awaiter of pull(): `co_await ch.pull()` evaluates to the oldest element, or
  /// nullopt once the channel is closed and drained. Used once by that co_await, on the
  /// awaiting thread (not thread-safe itself; the channel is).
  class pull_awaiter {
   public:
    /// Takes the oldest element, or sees the end of a closed and drained channel, without
    /// waiting: true (no suspension) unless the channel is empty and open, or consumers
    /// are parked already (then it queues behind them).
    WEFT_INLINE bool await_ready() { return m_ch->pull_ready(m_node); }
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
    /// Hands back what this pull evaluated to, unused (weft::when_any does it for a pull
    /// that lost its race): the element goes to the front of the channel, before every
    /// element still stored, and the next pull takes it; nothing for nullopt. Call after
    /// await_resume. Thread-safe (it takes the channel's lock). Throws std::bad_alloc
    /// (then the element is destroyed).
    void give_back(std::optional<T>&& v) {
      if (v) m_ch->give_back(std::move(*v));
    }

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
  /// closed; closed() tells which). Never blocks. Thread-safe. If writing to `out`
  /// throws, the element being written goes back to the front of the channel (unless
  /// memory runs out right then) and the exception propagates.
  template <class OutIt>
    requires std::output_iterator<OutIt, T>
  std::size_t try_pull_n(OutIt out, std::size_t max) {
    std::size_t done = 0;
    for (; done < max; ++done) {
      std::optional<T> got;
      if (pull_any(got) != store_status::ok) break;
      deliver(*out, std::move(*got));
      ++out;
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
    deliver(*out, std::move(*first));
    ++out;
    co_return 1 + try_pull_n(out, max - 1);
  }

 private:
  bool bounded() const noexcept { return m_capacity != unbounded; }

  /// Pushes into the store. When building T from `v` may throw, a T is built first,
  /// before anything is claimed (so an rvalue `v` is used whatever the result).
  template <class U>
  store_status store_push(U&& v) {
    if constexpr (std::is_nothrow_constructible_v<T, U&&>) {
      return bounded() ? m_ring->try_push(std::forward<U>(v)) : m_list->try_push(std::forward<U>(v));
    } else {
      T value(std::forward<U>(v));
      return store_push(std::move(value));
    }
  }
  template <class Out>
  store_status store_pop(Out&& out) noexcept {
    return bounded() ? m_ring->try_pop(std::forward<Out>(out)) : m_list->try_pop(std::forward<Out>(out));
  }

  /// A push found the ring full while no producer is parked. Consumers running on other
  /// threads right now free slots within nanoseconds: while the pull count keeps
  /// moving, wait for it (pauses, reading only that count) until a batch of slots is
  /// free, then push again, rather than park and be woken for every slot, or retry at
  /// every slot and fight the consumer for its cache lines. When the count stands still
  /// (no consumer is running: they may share this thread), one last try, then the
  /// caller parks.
  WEFT_NOINLINE channel_status push_while_pulled(T& value) {
    channel_status s = channel_status::full;
    wait_while_moving([&] { return m_ring->pulls(); }, m_waiting_producers,
                      [&] {
                        s = try_push(std::move(value));  // moves from value only when ok
                        return s != channel_status::full;
                      });
    return s;
  }
  /// As push_while_pulled, for a pull that found a bounded channel empty: waits while
  /// the push count moves, until a batch of elements is there. True when it took an
  /// element (or saw the end).
  WEFT_NOINLINE bool pull_while_pushed(pull_waiter& node) {
    return bounded() && wait_while_moving([&] { return m_ring->pushes(); }, m_waiting_consumers,
                                          [&] { return pull_any(node.m_value) != store_status::empty; });
  }
  /// The wait of both: `count()` reads the other side's count, `parked` counts this
  /// side's parked parties (the caller must queue behind them), `attempt()` tries the
  /// operation again and says whether it is settled. True when an attempt settled it.
  template <class Count, class Attempt>
  bool wait_while_moving(Count count, const std::atomic<std::uint32_t>& parked, Attempt attempt) {
    if (!worth_waiting()) return false;
    const std::uint64_t start = count();
    std::uint64_t seen = start;
    for (int round = 0; round < k_progress_rounds; ++round) {
      for (int i = 0; i < k_progress_pauses; ++i) detail::cpu_relax();
      const std::uint64_t now = count();
      const bool moving = now != seen;
      seen = now;
      if (round == 0) waited(moving);
      if (moving && now - start < progress_batch()) continue;
      if (parked.load(std::memory_order_relaxed) != 0) return false;
      if (attempt()) return true;
      if (!moving) return false;
    }
    return false;
  }
  /// Whether to wait for the other side at all: not while the last waits found it idle
  /// (it shares this thread, say), except every 64th time, to notice when that changes.
  bool worth_waiting() noexcept {
    const std::uint32_t n = m_futile_waits.load(std::memory_order_relaxed);
    if (n < k_futile_limit) return true;
    m_futile_waits.store(n + 1, std::memory_order_relaxed);  // a hint: racing updates may be lost
    return (n + 1) % 64 == 0;
  }
  /// After a wait's first look: did the other side move?
  void waited(bool moving) noexcept {
    const std::uint32_t n = m_futile_waits.load(std::memory_order_relaxed);
    const std::uint32_t next = moving ? 0 : (n < k_futile_limit ? n + 1 : n);
    if (next != n) m_futile_waits.store(next, std::memory_order_relaxed);
  }
  static constexpr std::uint32_t k_futile_limit = 4;

  /// Slots (or elements) a waiting party lets the other side make before it tries again.
  std::uint64_t progress_batch() const noexcept {
    return std::min<std::uint64_t>(64, std::max<std::size_t>(1, m_capacity / 4));
  }
  static constexpr int k_progress_rounds = 256;
  static constexpr int k_progress_pauses = 16;

  /// After a push published its element: serve parked consumers, if any. The seq_cst
  /// load pairs with the fence in publish_counts() (see the file comment).
  void after_push() noexcept {
    if (m_waiting_consumers.load(std::memory_order_seq_cst) != 0) [[unlikely]]
      settle();
  }
  /// After a pull freed a slot of a bounded channel: serve parked producers, if any.
  void after_pull() noexcept {
    if (bounded() && m_waiting_producers.load(std::memory_order_seq_cst) != 0) [[unlikely]]
      settle();
  }
  WEFT_NOINLINE void settle() noexcept {
    detail::deferred_wakes woken;  // destroyed after the lock guard: wakes after unlocking
    std::lock_guard lock(m_lock);
    serve(woken, nullptr);
  }

  /// Takes the oldest element into `got`: a handed-back one first, else from the store.
  store_status pull_any(std::optional<T>& got) {
    if (m_returned_count.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      std::lock_guard lock(m_lock);
      if (take_returned(got)) return store_status::ok;
    }
    const store_status s = store_pop([&](T&& v) noexcept { got.emplace(std::move(v)); });
    if (s == store_status::ok) after_pull();
    return s;
  }

  /// Writes `v` to `dst`; if that throws, `v` goes back to the front of the channel.
  template <class Dst>
  void deliver(Dst&& dst, T&& v) {
    try {
      std::forward<Dst>(dst) = std::move(v);
    } catch (...) {
      give_back(std::move(v));
      throw;
    }
  }
  void give_back(T&& v) {
    detail::deferred_wakes woken;
    std::lock_guard lock(m_lock);
    auto* node = new returned{std::move(v), nullptr};  // may throw bad_alloc: then it is lost
    (m_returned_last != nullptr ? m_returned_last->m_next : m_returned_first) = node;
    m_returned_last = node;
    m_returned_count.fetch_add(1, std::memory_order_relaxed);
    serve(woken, nullptr);
  }
  /// The lock held: moves the oldest handed-back element into `got`, if any.
  bool take_returned(std::optional<T>& got) noexcept {
    returned* node = m_returned_first;
    if (node == nullptr) return false;
    got.emplace(std::move(node->m_value));
    m_returned_first = node->m_next;
    if (m_returned_first == nullptr) m_returned_last = nullptr;
    delete node;
    m_returned_count.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  /// await_ready of a pull: takes an element or the end of the channel, or says wait.
  WEFT_INLINE bool pull_ready(pull_waiter& node) {
    if (m_waiting_consumers.load(std::memory_order_relaxed) != 0) [[unlikely]]
      return false;  // queue behind the parked consumers
    // closed: m_value stays nullopt
    return pull_any(node.m_value) != store_status::empty || pull_while_pushed(node);
  }

  /// The lock held, after a FIFO changed: publishes the counts the lock-free paths read,
  /// then fences, so that the store is read again only after they are visible.
  void publish_counts() noexcept {
    m_waiting_consumers.store(static_cast<std::uint32_t>(m_consumers.size()), std::memory_order_seq_cst);
    m_waiting_producers.store(static_cast<std::uint32_t>(m_producers.size()), std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  /// The lock held: settles parked parties, oldest first, while the store lets it:
  /// elements (handed-back ones first) to consumers, then the end once it is closed and
  /// drained; producers' elements into free slots, or false once it is closed. Collects
  /// the settled nodes into `woken`, except `self` (a node being parked now: its caller
  /// does not suspend).
  void serve(detail::deferred_wakes& woken, detail::waiter* self) noexcept {
    const auto hand = [&](detail::waiter* w) {
      if (w != self) woken.add(w);
    };
    const auto hand_all = [&](detail::waiter_list& list) {
      for (detail::waiter* w = list.take_all(); w != nullptr;) {
        detail::waiter* next = w->m_next;  // read first: hand() relinks w
        hand(w);
        w = next;
      }
    };
    for (bool progress = true; progress;) {
      progress = false;
      while (!m_consumers.empty()) {
        auto* c = static_cast<pull_waiter*>(m_consumers.front());
        store_status s = store_status::ok;
        if (!take_returned(c->m_value)) s = store_pop([&](T&& v) noexcept { c->m_value.emplace(std::move(v)); });
        if (s == store_status::ok) {
          hand(m_consumers.pop_front());
          progress = true;
        } else {
          if (s == store_status::closed) hand_all(m_consumers);  // closed and drained: the end for all
          break;
        }
      }
      while (!m_producers.empty()) {
        auto* p = static_cast<push_waiter*>(m_producers.front());
        const store_status s = store_push(std::move(*p->m_value));  // T&&: never throws
        if (s == store_status::ok) {
          p->m_ok = true;
          hand(m_producers.pop_front());
          progress = true;
        } else {
          if (s == store_status::closed) hand_all(m_producers);  // m_ok stays false: never pushed
          break;
        }
      }
    }
    publish_counts();
  }

  /// Parks a consumer unless something arrived meanwhile: true when it must wait.
  bool park_consumer(pull_waiter& node) {
    detail::deferred_wakes woken;  // destroyed after the lock guard: wakes after unlocking
    std::lock_guard lock(m_lock);
    if (!node.begin_park()) return false;  // stopped first: m_value stays empty
    m_consumers.push_back(&node);
    publish_counts();
    serve(woken, &node);
    return node.m_state == detail::wait_state::queued;
  }

  /// Parks a producer (its element in `value`) unless room or close() came meanwhile:
  /// true when it must wait (node.m_ok is set otherwise).
  bool park_producer(push_waiter& node, T& value) {
    detail::deferred_wakes woken;
    std::lock_guard lock(m_lock);
    if (!node.begin_park()) {  // stopped first: not pushed
      node.m_ok = false;
      return false;
    }
    node.m_ok = false;
    node.m_value = &value;
    m_producers.push_back(&node);
    publish_counts();
    serve(woken, &node);
    return node.m_state == detail::wait_state::queued;
  }

  /// The stop callbacks' steps (detail/waiter.hpp), under the lock that guards both
  /// FIFOs.
  static bool cancel_pull(void* self, detail::waiter& node) noexcept {
    auto* ch = static_cast<channel*>(self);
    std::lock_guard lock(ch->m_lock);
    const bool unlinked = ch->m_consumers.cancel(node);
    ch->publish_counts();
    return unlinked;
  }
  static bool cancel_push(void* self, detail::waiter& node) noexcept {
    auto* ch = static_cast<channel*>(self);
    std::lock_guard lock(ch->m_lock);
    const bool unlinked = ch->m_producers.cancel(node);
    ch->publish_counts();
    return unlinked;
  }

  const std::size_t m_capacity;
  std::optional<detail::mpmc_ring<T>> m_ring;  // bounded
  std::optional<detail::mpmc_list<T>> m_list;  // unbounded
  // Read by every operation, written only when parties park or leave: a line of their own.
  alignas(64) std::atomic<std::uint32_t> m_waiting_consumers{0};
  std::atomic<std::uint32_t> m_waiting_producers{0};
  std::atomic<std::size_t> m_returned_count{0};
  // The slow side.
  alignas(64) detail::spin_lock m_lock;
  std::atomic<std::uint32_t> m_futile_waits{0};  // worth_waiting(); written by parties about to park
  detail::waiter_list m_consumers;               // pull_waiter
  detail::waiter_list m_producers;               // push_waiter
  // Elements handed back by a pull whose output threw (rare), oldest first.
  struct returned {
    T m_value;
    returned* m_next;
  };
  returned* m_returned_first = nullptr;
  returned* m_returned_last = nullptr;
};

}  // namespace weft
