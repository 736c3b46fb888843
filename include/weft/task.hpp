// weft/task.hpp: weft::task<T>, the lazy coroutine every weft API is built on.
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "weft/config.hpp"
#include "weft/detail/frame_allocator.hpp"
#include "weft/detail/result.hpp"
#include "weft/detail/worker_context.hpp"
#include "weft/executor.hpp"

namespace weft {

template <class T = void>
class task;

namespace detail {

struct task_access;

/// How a finished task hands control on.
enum class completion : std::uint8_t {
  awaited,   // co_await'ed inline, or a forked child popped back by its joiner: resume
             // m_continuation by symmetric transfer
  forked,    // queued by spawn().fork(): join protocol on m_join (weft/spawn.hpp)
  detached,  // nobody joins: report an exception, destroy the frame
};

/// m_join values of a forked task besides the address of the waiting parent frame.
inline constexpr std::uintptr_t k_join_none = 0;       // not finished, nobody waits yet
inline constexpr std::uintptr_t k_join_done = 1;       // finished, result in the frame
inline constexpr std::uintptr_t k_join_abandoned = 2;  // the handle was dropped: self-destroy

/// State shared by every weft::task promise. Field order keeps the hot ones first.
struct promise_base {
  std::coroutine_handle<> m_continuation;  // awaited, or forked and joined inline
  std::atomic<std::uintptr_t> m_join{k_join_none};
  executor* m_home = nullptr;   // forked to another executor: where the parent resumes
  void* m_next_join = nullptr;  // bulk forks: the sibling joined after this one (weft/detail/bulk.hpp)
  // The stop token the task runs under (weft/stop.hpp), or null for none. It points into
  // an owner that outlives the task: the awaiting task's own (inherited by co_await, see
  // task::awaiter), or a weft::scope's state (its children).
  const std::stop_token* m_stop = nullptr;
  completion m_mode = completion::awaited;
  std::uint8_t m_prio = 0;         // priority it was queued at (forked/detached)
  std::uint8_t m_parent_prio = 0;  // the parent's priority, restored when it resumes
  bool m_plain_params = false;     // no parameter needs a destructor (see pop_finished_frame)

  static void* operator new(std::size_t n) { return allocate_frame(n); }
  static void operator delete(void* p, std::size_t n) noexcept { deallocate_frame(p, n); }

  std::suspend_always initial_suspend() const noexcept { return {}; }
};

/// The stop token of the coroutine `h` suspends: a weft task's (promise_base::m_stop),
/// a fiber's (fiber_options::stop_token), or null for a coroutine that has none.
template <class Promise>
const std::stop_token* awaiting_token(std::coroutine_handle<Promise> h) noexcept {
  if constexpr (std::is_void_v<Promise>) {
    return nullptr;
  } else if constexpr (requires {
                         { h.promise().m_stop } -> std::convertible_to<const std::stop_token*>;
                       }) {
    return h.promise().m_stop;
  } else {
    return nullptr;
  }
}

/// Prints a detached task's exception to stderr (src/task.cpp). Never throws.
void report_detached_exception(std::exception_ptr e) noexcept;
/// Resumes `parent` on `home` by queueing it there (src/task.cpp).
void resume_at_home(executor& home, std::coroutine_handle<> parent, unsigned prio) noexcept;

template <class Promise>
std::coroutine_handle<> join_rest(void* next, std::coroutine_handle<> c) noexcept;

/// Completion of a forked or detached task: everything but the plain co_await path.
template <class Promise>
WEFT_NOINLINE std::coroutine_handle<> complete_queued(std::coroutine_handle<Promise> h) noexcept {
  Promise& p = h.promise();
  if (p.m_mode == completion::detached) {
    if (p.m_result.has_error()) report_detached_exception(p.m_result.error());
    h.destroy();
    return take_local();
  }
  // Forked and run by someone other than its joiner (a thief, the worker loop).
  const std::uintptr_t prev = p.m_join.exchange(k_join_done, std::memory_order_acq_rel);
  // acq_rel: release publishes the result to the joiner (pairs with its acquire load or
  // CAS); acquire sees the parent's registration (pairs with its release CAS).
  if (prev == k_join_none) return take_local();
  if (prev == k_join_abandoned) {
    if (p.m_result.has_error()) report_detached_exception(p.m_result.error());
    h.destroy();
    return take_local();
  }
  auto parent = std::coroutine_handle<>::from_address(reinterpret_cast<void*>(prev));
  if (p.m_home != nullptr && p.m_home != t_executor) {
    resume_at_home(*p.m_home, parent, p.m_parent_prio);
    return take_local();
  }
  t_prio = p.m_parent_prio;
  // A bulk-forked sibling (weft/detail/bulk.hpp): the waiter registered here waits for
  // the rest of the chain too; join it from this thread.
  if (p.m_next_join != nullptr) return join_rest<Promise>(p.m_next_join, parent);
  return parent;
}

/// The bulk join (weft/detail/bulk.hpp): joins the siblings from `next` down the
/// m_next_join links for `c`, the coroutine that awaits them all, and returns what this
/// thread runs now: a sibling popped back from this worker's deque (when it finishes,
/// its final_suspend goes on down the chain); or, when a sibling is running elsewhere,
/// `c` registered in its m_join (its completion goes on down the chain, see
/// complete_queued) and this thread's own newest work; or `c` once all have finished.
template <class Promise>
WEFT_NOINLINE std::coroutine_handle<> join_rest(void* next, std::coroutine_handle<> c) noexcept {
  while (next != nullptr) {
    auto h = std::coroutine_handle<Promise>::from_address(next);
    Promise& p = h.promise();
    worker_context* w = t_worker;
    // Read before the CAS below: once `c` is registered, the sibling may finish on
    // another thread, run the rest of the chain and resume `c`, which frees every sibling.
    void* const after = p.m_next_join;
    const unsigned prio = p.m_prio;
    void* other = nullptr;
    if (w != nullptr && prio < w->m_inline_limit.load(std::memory_order_relaxed)) {
      other = w->m_deques[prio].pop();
      if (other == next) {  // ours again: run it now, it goes on with the chain itself
        p.m_mode = completion::awaited;
        p.m_continuation = c;
        t_prio = prio;
        return h;
      }
    }
    std::uintptr_t expected = k_join_none;
    // release: the state of `c` and of the finished siblings is visible to whoever
    // resumes `c`; acquire (failure): the sibling's result (pairs with complete_queued).
    if (p.m_join.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(c.address()),
                                         std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (other != nullptr) {
        t_prio = prio;
        return std::coroutine_handle<>::from_address(other);
      }
      return take_local();
    }
    if (other != nullptr) push_local(*w, prio, other);  // the sibling had finished: give it back
    next = after;
  }
  return c;
}

/// A child of a bulk fork finished inline, with siblings still to join: if the next one
/// is still the newest item of this worker's deque, run it right away on the same
/// continuation; otherwise join_rest.
template <class Promise>
WEFT_INLINE std::coroutine_handle<> chain_next_join(Promise& p) noexcept {
  auto next = std::coroutine_handle<Promise>::from_address(p.m_next_join);
  worker_context* w = t_worker;
  Promise& np = next.promise();
  // Siblings chained by m_next_join share one priority (fork_bulk, spawn_many).
  if (w != nullptr && np.m_prio < w->m_inline_limit.load(std::memory_order_relaxed) &&
      w->m_deques[np.m_prio].pop_if_newest(p.m_next_join)) [[likely]] {
    np.m_mode = completion::awaited;  // joined inline: it returns straight to the continuation
    np.m_continuation = p.m_continuation;
    return next;
  }
  return join_rest<Promise>(p.m_next_join, p.m_continuation);
}

struct final_awaiter {
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  WEFT_INLINE std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
    Promise& p = h.promise();
    if (p.m_mode == completion::awaited) [[likely]] {  // also a forked child its joiner popped back
      if (p.m_next_join != nullptr) return chain_next_join(p);
      return p.m_continuation;
    }
    return complete_queued(h);
  }
  void await_resume() const noexcept {}
};

template <class T>
struct promise_returns : promise_base {
  result<T> m_result;
  template <class U = T>
    requires std::convertible_to<U&&, T>
  void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    m_result.set_value(std::forward<U>(v));
  }
};

template <>
struct promise_returns<void> : promise_base {
  result<void> m_result;
  void return_void() const noexcept {}
};

[[noreturn]] void throw_bad_await(const char* what);  // src/task.cpp

/// Whether a finished task<T>'s result may be left in its frame undestroyed (for void
/// and references: when it holds no exception).
template <class T>
inline constexpr bool k_plain_result =
    std::is_void_v<T> || std::is_reference_v<T> || std::is_trivially_destructible_v<T>;

/// Frees the frame of finished task `h` (result taken, no exception in it) by popping
/// it off this thread's frame stack, without the destroy() call, where that is all
/// destroy() would do: the result and the parameters need no destructor (k_plain_result,
/// m_plain_params; nothing else is alive at the final suspend point) and the frame is
/// the stack's top (checked through its footer: its size is the compiler's, unknown
/// here), with the frame below not marked freed. Then true; else false, nothing changed.
template <class T>
WEFT_INLINE bool pop_finished_frame(std::coroutine_handle<typename task<T>::promise_type> h) noexcept {
  if constexpr (!WEFT_SANITIZED && k_plain_result<T>) {
    if (!h.promise().m_plain_params) return false;
    frame_stack& s = t_frame_cache.m_stack;
    const auto start = reinterpret_cast<std::uintptr_t>(h.address());
    return frame_ends_at(start, s.m_top) && frame_stack_cut(s, start);
  } else {
    return false;
  }
}

/// The result of finished task `h` (its value moved out, or its exception rethrown);
/// the frame is freed either way, after the value left it (popped off the frame stack
/// when it can be, see pop_finished_frame).
template <class T>
WEFT_INLINE decltype(auto) take_and_free(std::coroutine_handle<typename task<T>::promise_type> h) {
  struct release_frame {
    std::coroutine_handle<typename task<T>::promise_type> h;
    WEFT_INLINE ~release_frame() {
      if (h.promise().m_result.has_error() || !pop_finished_frame<T>(h)) h.destroy();
    }
  } guard{h};
  return guard.h.promise().m_result.take();
}

}  // namespace detail

/// A lazy coroutine producing a T (or void, or a reference). Nothing runs until it is
/// awaited (`co_await t` runs it inline on the awaiting thread by symmetric transfer,
/// returning its value or rethrowing its exception) or handed to weft::spawn, post,
/// sync_wait or run. Move-only; destroying a task that never started frees its frame.
/// A task is awaited at most once. Not thread-safe: one owner at a time.
template <class T>
class [[nodiscard]] task {
 public:
  /// What `co_await` on the task evaluates to.
  using value_type = T;

  /// The coroutine promise (the compiler's protocol; not API).
  struct promise_type : detail::promise_returns<T> {
    /// Sees the coroutine's parameters (the object first, for a member function) and
    /// notes whether any needs a destructor; references count as what they refer to.
    template <class... A>
    promise_type(const A&...) noexcept {  // NOLINT: not explicit, it is also the default
      this->m_plain_params = (std::is_trivially_destructible_v<A> && ...);
    }
    task get_return_object() noexcept { return task{handle_type::from_promise(*this)}; }
    detail::final_awaiter final_suspend() const noexcept { return {}; }
    void unhandled_exception() noexcept { this->m_result.set_error(std::current_exception()); }
  };
  /// The coroutine handle type (of detail::task_handle and detail::release_task).
  using handle_type = std::coroutine_handle<promise_type>;

  /// An empty task; awaiting it throws std::logic_error.
  task() noexcept = default;
  /// Takes over `o`'s coroutine; `o` is left empty.
  task(task&& o) noexcept : m_h(std::exchange(o.m_h, {})) {}
  /// Destroys this task's coroutine frame, if any, then takes over `o`'s; `o` is left
  /// empty.
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      if (m_h) m_h.destroy();
      m_h = std::exchange(o.m_h, {});
    }
    return *this;
  }
  /// Destroys the coroutine frame, if any (a task that never started, or one that finished).
  ~task() {
    if (m_h) m_h.destroy();
  }

  /// True when the task holds a coroutine (not default-constructed or moved-from).
  bool valid() const noexcept { return static_cast<bool>(m_h); }
  /// valid().
  explicit operator bool() const noexcept { return valid(); }

  /// What operator co_await returns: used once by that co_await, on the awaiting thread
  /// (the coroutine protocol; not thread-safe).
  struct awaiter {
    handle_type m_h;  ///< the task's coroutine (still owned by the task)
    /// Never ready: the task runs in await_suspend. Throws std::logic_error for an empty
    /// or moved-from task, or one that already completed.
    bool await_ready() const {
      if (!m_h) [[unlikely]]
        detail::throw_bad_await("weft: co_await on an empty or moved-from task");
      if (m_h.done()) [[unlikely]]
        detail::throw_bad_await("weft: co_await on a task that already completed");
      return false;
    }
    /// Makes `awaiting` the task's continuation and transfers into the task, on this
    /// thread. A weft task awaiting it passes on its stop token (weft/stop.hpp).
    template <class Awaiting>
    WEFT_INLINE std::coroutine_handle<> await_suspend(std::coroutine_handle<Awaiting> awaiting) noexcept {
      promise_type& p = m_h.promise();
      p.m_continuation = awaiting;
      p.m_stop = detail::awaiting_token(awaiting);
      return m_h;
    }
    /// The task's result (a value is moved out), or its exception rethrown.
    decltype(auto) await_resume() { return m_h.promise().m_result.take(); }
  };

  /// Runs the task inline; evaluates to its value, or rethrows its exception.
  /// Throws std::logic_error for an empty, moved-from or already-awaited task.
  awaiter operator co_await() && noexcept { return awaiter{m_h}; }
  /// Same as the rvalue form (a task is still awaited only once).
  awaiter operator co_await() & noexcept { return awaiter{m_h}; }

 private:
  friend struct detail::task_access;
  explicit task(handle_type h) noexcept : m_h(h) {}
  handle_type m_h;
};

namespace detail {
/// The runtime's access to a task's coroutine (spawn, post, scope, ...).
struct task_access {
  /// The coroutine, still owned by `t`.
  template <class T>
  WEFT_INLINE static typename task<T>::handle_type handle(const task<T>& t) noexcept {
    return t.m_h;
  }
  /// Takes the coroutine from `t` (which is left empty); the caller owns it.
  template <class T>
  WEFT_INLINE static typename task<T>::handle_type release(task<T>& t) noexcept {
    return std::exchange(t.m_h, {});
  }
};
/// task_access::handle(t).
template <class T>
WEFT_INLINE typename task<T>::handle_type task_handle(const task<T>& t) noexcept {
  return task_access::handle(t);
}
/// task_access::release(t).
template <class T>
WEFT_INLINE typename task<T>::handle_type release_task(task<T>& t) noexcept {
  return task_access::release(t);
}
/// True for weft::task<T> (any T).
template <class T>
struct is_task : std::false_type {};
template <class T>
struct is_task<task<T>> : std::true_type {};
}  // namespace detail

}  // namespace weft
