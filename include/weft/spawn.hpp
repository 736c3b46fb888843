// weft/spawn.hpp: fork-join. weft::spawn(t) with .fork(), .detach(), .priority(p),
// .run_on(ex), and co_await; weft::fork_handle<T>.
//
// Where a child runs, for every spawn form: on the executor the spawning code runs on
// (on a plain thread, weft::default_pool()), at the spawner's priority, unless told
// otherwise: weft::spawn(t).run_on(ex) / .priority(p); spawn_many(...).run_on(ex);
// spawn_tuple(...).run_on(ex); fork_group forks where
// its owner runs; weft::scope::spawn(weft::spawn(t).run_on(ex)) (weft/scope.hpp). A
// joined parent always resumes on its own executor. So a task on an I/O executor that
// fans CPU work out with a bare spawn_many runs it on the I/O thread: add .run_on(pool).
#pragma once

#include <coroutine>
#include <functional>
#include <type_traits>
#include <utility>

#include "weft/detail/fork.hpp"
#include "weft/executor.hpp"
#include "weft/task.hpp"

namespace weft {

/// The handle of a forked task: `co_await h` waits for it and evaluates to its value
/// (or rethrows its exception). Move-only; awaited at most once. Destroying a handle
/// that was not awaited detaches the child (it still runs; its frame is freed when it
/// finishes; an exception is reported to stderr). Not thread-safe: one owner.
template <class T>
class [[nodiscard]] fork_handle {
 public:
  /// The child's coroutine handle type.
  using handle_type = typename task<T>::handle_type;

  /// An empty handle; awaiting it throws std::logic_error.
  fork_handle() noexcept = default;
  /// Takes over `o`'s child; `o` is left empty.
  fork_handle(fork_handle&& o) noexcept : m_h(std::exchange(o.m_h, {})) {}
  /// Detaches this handle's child, if any (as detach()), then takes over `o`'s; `o` is
  /// left empty.
  fork_handle& operator=(fork_handle&& o) noexcept {
    if (this != &o) {
      reset();
      m_h = std::exchange(o.m_h, {});
    }
    return *this;
  }
  /// Detaches the child if it was not awaited (see the class comment).
  ~fork_handle() { reset(); }

  /// True when the handle refers to a child not yet awaited.
  bool valid() const noexcept { return static_cast<bool>(m_h); }
  /// valid().
  explicit operator bool() const noexcept { return valid(); }

  /// True once the child finished (a racy snapshot; safe to call while the child runs
  /// on another thread).
  bool ready() const noexcept {
    return m_h && m_h.promise().m_join.load(std::memory_order_acquire) == detail::k_join_done;
  }

  /// Lets the child run on unobserved (see the class comment).
  void detach() noexcept { reset(); }

  /// What operator co_await returns: used once by that co_await, on the awaiting thread
  /// (the coroutine protocol; not thread-safe).
  struct awaiter : detail::join_awaiter {
    fork_handle* m_self;  ///< the handle awaited (emptied when the result is taken)
    /// Takes the child's result and frees its frame (the handle becomes empty): its
    /// value, or its exception rethrown. (await_ready and await_suspend are the join
    /// protocol's: weft/detail/fork.hpp.)
    WEFT_INLINE decltype(auto) await_resume() { return detail::take_and_free<T>(std::exchange(m_self->m_h, {})); }
  };

  /// Waits for the child; its value, or its exception rethrown.
  /// Throws std::logic_error when the handle is empty or already awaited.
  awaiter operator co_await() & {
    if (!m_h) [[unlikely]]
      detail::throw_bad_await("weft: co_await on an empty or already-awaited fork_handle");
    return awaiter{{m_h}, this};
  }
  /// Same as the lvalue form.
  awaiter operator co_await() && { return operator co_await(); }

 private:
  template <class U>
  friend class spawn_op;  // spawn_op::fork makes the handle of the child it queued
  /// Adopts the queued child `h`.
  explicit fork_handle(handle_type h) noexcept : m_h(h) {}
  void reset() noexcept {
    if (m_h) detail::abandon_child(std::exchange(m_h, {}));
  }
  handle_type m_h;
};

template <class T>
class scope;

/// What weft::spawn returns: configure with .priority() / .run_on(), then .fork(),
/// .detach(), or co_await it. Single use; not thread-safe (a temporary of the spawning
/// code). The child it queues may run on any thread of its executor at once.
template <class T>
class [[nodiscard]] spawn_op {
 public:
  /// Takes the child task (see weft::spawn).
  explicit spawn_op(task<T>&& t) noexcept : m_task(std::move(t)) {}

  /// Queue the child at priority p of its executor (0 is highest). Checked when the
  /// child is queued: std::out_of_range if p >= the executor's priorities().
  spawn_op&& priority(unsigned p) && noexcept {
    m_prio = p;
    return std::move(*this);
  }
  /// Run the child on `ex`; the parent still resumes on its own executor after a join.
  spawn_op&& run_on(executor& ex) && noexcept {
    m_target = &ex;
    return std::move(*this);
  }

  /// Queues the child where it can be stolen and returns its handle; the caller goes
  /// on running. Throws std::logic_error for an empty task.
  WEFT_INLINE fork_handle<T> fork() && { return fork_handle<T>{fork_raw()}; }

  /// Queues the child and forgets it. Its exception, if any, is reported to stderr.
  WEFT_INLINE void detach() && {
    auto h = take();
    h.promise().m_mode = detail::completion::detached;
    enqueue_or_destroy(h);
  }

  /// Runs the child and waits for it: inline when nothing was configured, else as a
  /// fork immediately joined. Either way the child runs under the awaiting task's stop
  /// token (weft/stop.hpp). Evaluates to its value or rethrows its exception.
  WEFT_INLINE auto operator co_await() && {
    if (m_prio == detail::k_inherit_priority && m_target == nullptr)
      return awaiter{detail::release_task(m_task), nullptr};
    return awaiter{take(), this};  // forked in await_suspend, once the awaiting task is known
  }

 private:
  template <class U>
  friend class scope;  // scope::spawn(spawn_op) starts the child its own way
  using handle_type = typename task<T>::handle_type;

  // One owned handle, run inline (m_fork null) or forked and joined (m_fork: the op
  // whose priority and executor the fork takes). m_fork is a constant after inlining
  // (nothing configured is the common case), and await_resume frees the frame and
  // empties m_h, so the destructor's check folds away: an inline co_await costs what
  // co_await on the task itself costs. The configured child is forked in await_suspend,
  // where the awaiting task (whose token it inherits) is known; `m_fork` points at the
  // spawn_op being awaited, alive until the co_await expression ends.
  struct awaiter {
    handle_type m_h;
    spawn_op* m_fork;
    bool m_forked = false;
    awaiter(handle_type h, spawn_op* fork) noexcept : m_h(h), m_fork(fork) {}
    awaiter(const awaiter&) = delete;
    awaiter& operator=(const awaiter&) = delete;
    ~awaiter() {  // not awaited after all (await_ready threw), or never resumed
      if (m_h) {
        if (m_forked)
          detail::abandon_child(m_h);
        else
          m_h.destroy();
      }
    }
    WEFT_INLINE bool await_ready() {
      if (m_fork == nullptr) return typename task<T>::awaiter{m_h}.await_ready();  // throws for an empty task
      return false;
    }
    template <class Awaiting>
    WEFT_INLINE std::coroutine_handle<> await_suspend(std::coroutine_handle<Awaiting> c) {
      if (m_fork == nullptr) return typename task<T>::awaiter{m_h}.await_suspend(c);
      handle_type h = std::exchange(m_h, {});  // freed by enqueue_or_destroy if queueing throws
      h.promise().m_stop = detail::awaiting_token(c);
      h.promise().m_mode = detail::completion::forked;
      m_fork->enqueue_or_destroy(h);
      m_h = h;
      m_forked = true;
      detail::join_awaiter join{h};
      if (join.await_ready()) return c;  // already run by a thief
      return join.await_suspend(c);
    }
    /// The child's result (its exception rethrown); its frame is freed either way.
    WEFT_INLINE decltype(auto) await_resume() { return detail::take_and_free<T>(std::exchange(m_h, {})); }
  };

  WEFT_INLINE handle_type fork_raw() {
    auto h = take();
    h.promise().m_mode = detail::completion::forked;
    enqueue_or_destroy(h);
    return h;
  }

  /// Queues `h`; if that throws (bad priority, executor shutting down), the child never
  /// ran and nobody else has it: free it, then let the exception out.
  WEFT_INLINE void enqueue_or_destroy(handle_type h) {
    try {
      detail::enqueue_child(h.promise(), h, m_prio, m_target);
    } catch (...) {
      h.destroy();
      throw;
    }
  }

  WEFT_INLINE handle_type take() {
    if (!m_task.valid()) [[unlikely]]
      detail::throw_bad_await("weft::spawn: empty or moved-from task");
    return detail::release_task(m_task);
  }

  task<T> m_task;
  unsigned m_prio = detail::k_inherit_priority;
  executor* m_target = nullptr;
};

/// Starts describing how task `t` runs beside its parent; see spawn_op.
/// `auto h = weft::spawn(child()).fork(); ...; auto v = co_await h;`
/// Thread-safe: call it from a task on any executor, a fiber, or a plain thread (there
/// the child is queued on weft::default_pool() unless .run_on() names an executor).
template <class T>
WEFT_INLINE spawn_op<T> spawn(task<T>&& t) noexcept {
  return spawn_op<T>{std::move(t)};
}

/// The task that `std::invoke(fn, args...)` returns (a weft::task<T>), described as by
/// spawn(task): `auto h = weft::spawn(fib, n - 1).fork();`, or `co_await
/// weft::spawn(fib, n - 2)` to run it inline. Same behaviour and thread-safety as
/// spawn(fn(args...)); whatever throws before the task exists (fn itself, allocating
/// its frame, copying the arguments) propagates from here.
/// Why a second form: with clang, when `fn` is a function object (a lambda or a class
/// with operator()), the child's frame set-up is inlined into the caller, which clang-19
/// does not do for a coroutine that calls itself by name (spawn(f(n - 1)) inside f;
/// fewer instructions per call: bench/README.md, on fib). With a plain function it is
/// spawn(fn(args...)), no faster.
/// Lifetimes are as for calling fn yourself: a coroutine lambda's captures and
/// reference parameters must outlive the task.
template <class F, class... A>
  requires std::invocable<F, A...> && detail::is_task<std::invoke_result_t<F, A...>>::value
auto spawn(F&& fn, A&&... args) {
  return spawn_op<typename std::invoke_result_t<F, A...>::value_type>{
      std::invoke(std::forward<F>(fn), std::forward<A>(args)...)};
}

}  // namespace weft
