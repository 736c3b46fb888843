// weft/fiber.hpp: stackful fibers on weft executors. weft::spawn_fiber(fn, options)
// runs a plain function with its own stack; inside it, weft::await(awaitable) suspends
// the fiber (not the thread) until the awaitable completes.
//
// How it works (src/fiber.cpp has the details): every fiber is driven by a small
// coroutine, its driver, which is what the executor queues, steals and resumes like
// any task. The driver switches into the fiber's stack (Boost.Context). weft::await
// hands the awaiter to the driver and switches back to it; the driver, on the worker's
// own stack, co_awaits it like any coroutine would, and when it is resumed (on any
// worker, at the fiber's priority) it switches into the fiber again. So a suspended
// fiber is just a suspended coroutine: it migrates between workers, is stolen, and is
// resumed by symmetric transfer like one.
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "weft/config.hpp"
#include "weft/detail/result.hpp"
#include "weft/executor.hpp"

namespace weft {

/// How weft::spawn_fiber runs a fiber: `weft::spawn_fiber(fn, {.priority = 1})`.
/// A plain value (no synchronization); read once by spawn_fiber.
struct fiber_options {
  /// `priority` value meaning: the spawning task's priority when it runs on the target
  /// executor (clamped to its levels), else 0.
  static constexpr unsigned k_inherit = ~0u;

  /// Where the fiber runs: nullptr means the calling thread's executor, or
  /// weft::default_pool() on a plain thread. The executor must outlive the fiber.
  weft::executor* executor = nullptr;
  /// Priority it is queued at; 0 is highest. After an await it resumes like a task
  /// would (e.g. resume_on keeps the current priority).
  unsigned priority = k_inherit;
  /// Usable stack bytes, rounded up to whole pages, 16 KiB .. 1 GiB. Below the stack
  /// lies an inaccessible guard region (guard_size): overflowing the stack kills the
  /// process with SIGSEGV instead of corrupting memory. Under ASan/TSan the stack is 4x
  /// larger (instrumented frames are bigger).
  std::size_t stack_size = 64 * 1024;
  /// Bytes of the inaccessible guard region below the stack, rounded up to whole pages,
  /// at least one page (the default), at most 64 MiB (std::invalid_argument beyond).
  /// A guard only catches an overflow whose first access lands inside it: a single
  /// frame larger than the guard (a big local array, alloca) can step over it and
  /// corrupt whatever lies below, silently. Code with such frames should ask for a
  /// guard at least as large as its largest frame, or be compiled with
  /// -fstack-clash-protection (which probes every page of a large frame; weft's own
  /// sources are, where the compiler has it). Costs address space only.
  std::size_t guard_size = 0;
  /// The stop token the fiber runs under, as a task does (weft/stop.hpp): what it
  /// awaits with weft::await watches it (a task awaited passes it on; a channel pull
  /// ends with nullopt, a lock throws weft::cancelled, an io_uring operation ends with
  /// std::errc::operation_canceled). Empty by default: nothing watches anything.
  std::stop_token stop_token{};
};

namespace detail {

class fiber_base;

/// The promise of a fiber's driver coroutine (src/fiber.cpp). What a fiber awaits is
/// suspended with the driver's handle, typed, so that it finds the fiber's stop token in
/// m_stop as it would a task's (detail::awaiting_token).
struct fiber_driver_promise {
  explicit fiber_driver_promise(fiber_base& f) noexcept;
  static void* operator new(std::size_t n);
  static void operator delete(void* p, std::size_t n) noexcept;
  std::coroutine_handle<fiber_driver_promise> get_return_object() noexcept {
    return std::coroutine_handle<fiber_driver_promise>::from_promise(*this);
  }
  std::suspend_always initial_suspend() const noexcept { return {}; }
  /// Frees the driver and completes the fiber's join word.
  struct final_awaiter {
    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<fiber_driver_promise> h) const noexcept;
    void await_resume() const noexcept {}
  };
  final_awaiter final_suspend() const noexcept { return {}; }
  void return_void() const noexcept {}
  [[noreturn]] void unhandled_exception() const noexcept { std::terminate(); }  // the body cannot throw

  fiber_base* m_fiber;
  const std::stop_token* m_stop;  // the fiber's token, or null when it has none
};

/// The driver's handle, as awaiters see it.
using fiber_driver_handle = std::coroutine_handle<fiber_driver_promise>;

/// One pending weft::await of a fiber, type-erased for its driver: await_suspend of
/// the real awaiter, called on the worker's stack with the driver's handle.
struct fiber_await_op {
  void* m_awaiter;
  std::coroutine_handle<> (*m_suspend)(void* awaiter, fiber_driver_handle driver);
  std::exception_ptr m_error;  // await_suspend threw: rethrown in the fiber
};

/// m_join states of a fiber besides the address of the coroutine waiting for it.
inline constexpr std::uintptr_t k_fiber_running = 0;    // not finished, nobody waits yet
inline constexpr std::uintptr_t k_fiber_done = 1;       // finished, result ready
inline constexpr std::uintptr_t k_fiber_abandoned = 2;  // the handle was dropped

/// The type-independent part of a fiber: its stack, saved contexts, sanitizer state
/// and join word. Created by spawn_fiber, owned jointly by the driver (until the
/// function returned) and the fiber_handle (until the result was taken or dropped);
/// m_join decides who frees it. Fields other than m_join are touched by one thread at
/// a time (whoever runs the driver or the fiber), handed over through the executor.
class fiber_base {
 public:
  fiber_base() = default;
  fiber_base(const fiber_base&) = delete;
  fiber_base& operator=(const fiber_base&) = delete;

  /// Runs the user's function on the fiber's stack and stores its outcome.
  virtual void run_body() noexcept = 0;
  /// The stored exception, or null.
  virtual std::exception_ptr error() const noexcept = 0;

  // ---- src/fiber.cpp -------------------------------------------------------------
  /// Allocates the stack and queues the driver (on the spawning thread). Throws on bad
  /// options, shutdown, or when no stack can be mapped; then nothing was queued.
  void start(const fiber_options& options);
  /// fiber_handle awaiter: registers `waiter`; returns what to run next.
  std::coroutine_handle<> register_waiter(std::coroutine_handle<> waiter) noexcept;
  /// fiber_handle dropped before taking the result.
  void abandon() noexcept;
  /// Frees this object and its stack (virtual destructor).
  virtual ~fiber_base();

  std::atomic<std::uintptr_t> m_join{k_fiber_running};

  // Everything below belongs to src/fiber.cpp.
  executor* m_executor = nullptr;
  unsigned m_prio = 0;
  executor* m_waiter_home = nullptr;  // executor of the coroutine waiting for the result
  unsigned m_waiter_prio = 0;
  void* m_fiber_ctx = nullptr;     // where to jump to resume the fiber
  void* m_return_ctx = nullptr;    // where the fiber jumps back to (its driver's thread)
  fiber_await_op* m_op = nullptr;  // the pending await, set by the fiber before switching out
  void* m_stack_base = nullptr;    // mapping base (the guard region)
  std::size_t m_stack_bytes = 0;   // whole mapping, guard region included
  std::size_t m_guard_bytes = 0;   // the guard region, whole pages
  bool m_finished = false;
  std::stop_token m_stop_token;  // fiber_options::stop_token
  void* m_eh_caught = nullptr;   // the fiber's C++ exception-handling globals while switched out
  unsigned m_eh_uncaught = 0;
  const void* m_asan_return_bottom = nullptr;  // ASan: the stack the fiber returns to
  std::size_t m_asan_return_size = 0;
  void* m_tsan_fiber = nullptr;  // TSan: this fiber, and the one to switch back to
  void* m_tsan_return = nullptr;
};

/// The fiber running the caller; throws std::logic_error on a thread that is not
/// running a fiber.
fiber_base& this_fiber_or_throw();
/// Suspends fiber `f` (the caller's) until its driver resumes it after `op`; rethrows
/// what op's await_suspend threw.
void fiber_suspend(fiber_base& f, fiber_await_op& op);
/// Prints a dropped fiber's exception to stderr.
void report_fiber_exception(std::exception_ptr e) noexcept;

/// Makes the fiber_handle of a started fiber (spawn_fiber).
struct fiber_access;

/// A fiber producing a T: what a fiber_handle<T> sees.
template <class T>
class fiber_result : public fiber_base {
 public:
  std::exception_ptr error() const noexcept final { return m_result.error(); }
  result<T> m_result;
};

/// A fiber running a Fn that returns T.
template <class T, class Fn>
class fiber_state final : public fiber_result<T> {
 public:
  explicit fiber_state(Fn&& fn) : m_fn(std::move(fn)) {}
  explicit fiber_state(const Fn& fn) : m_fn(fn) {}
  void run_body() noexcept override {
    try {
      if constexpr (std::is_void_v<T>) {
        std::invoke(std::move(*m_fn));
      } else {
        this->m_result.set_value(std::invoke(std::move(*m_fn)));
      }
    } catch (...) {
      this->m_result.set_error(std::current_exception());
    }
    m_fn.reset();  // captures die on the fiber, before anyone is told it finished
  }

 private:
  std::optional<Fn> m_fn;
};

template <class A>
concept member_co_await = requires(A&& a) { static_cast<A&&>(a).operator co_await(); };
template <class A>
concept free_co_await = requires(A&& a) { operator co_await(static_cast<A&&>(a)); };

/// The awaiter co_await would use for `a`: its operator co_await, or `a` itself.
template <class A>
decltype(auto) get_awaiter(A&& a) {
  if constexpr (member_co_await<A>)
    return static_cast<A&&>(a).operator co_await();
  else if constexpr (free_co_await<A>)
    return operator co_await(static_cast<A&&>(a));
  else
    return static_cast<A&&>(a);
}

/// await_suspend of Awaiter, with its void / bool / handle result as the handle to run.
template <class Awaiter>
std::coroutine_handle<> suspend_erased(void* awaiter, fiber_driver_handle driver) {
  auto& a = *static_cast<Awaiter*>(awaiter);
  using S = decltype(a.await_suspend(driver));
  if constexpr (std::is_void_v<S>) {
    a.await_suspend(driver);
    return std::noop_coroutine();
  } else if constexpr (std::is_same_v<S, bool>) {
    return a.await_suspend(driver) ? std::coroutine_handle<>{std::noop_coroutine()} : driver;
  } else {
    return a.await_suspend(driver);
  }
}

/// weft::await's result type: a reference into the awaiter would dangle, so an rvalue
/// reference becomes a value; lvalue references and values pass through.
template <class R>
using await_result_t = std::conditional_t<std::is_rvalue_reference_v<R>, std::remove_cvref_t<R>, R>;

}  // namespace detail

/// The result of weft::spawn_fiber: `co_await h` (from a task) or `weft::await(h)` (from
/// another fiber) waits for the fiber and evaluates to its function's value, or
/// rethrows its exception. Awaited at most once. Dropping (or detach()ing) a handle
/// without awaiting it is fire-and-forget: the fiber still runs to its end and an
/// exception it throws is printed to stderr. Move-only; not thread-safe (one owner).
template <class T>
class fiber_handle {
 public:
  /// What awaiting the handle evaluates to: the fiber function's return type.
  using value_type = T;

  /// An empty handle; awaiting it throws std::logic_error.
  fiber_handle() noexcept = default;
  /// Takes over `o`'s fiber; `o` is left empty.
  fiber_handle(fiber_handle&& o) noexcept : m_state(std::exchange(o.m_state, nullptr)) {}
  /// Drops this handle's fiber, if any (as detach()), then takes over `o`'s; `o` is
  /// left empty.
  fiber_handle& operator=(fiber_handle&& o) noexcept {
    if (this != &o) {
      reset();
      m_state = std::exchange(o.m_state, nullptr);
    }
    return *this;
  }
  /// Drops the fiber if its result was not taken (as detach(): it runs on unobserved).
  ~fiber_handle() { reset(); }

  /// True when the handle refers to a fiber whose result was not taken yet.
  bool valid() const noexcept { return m_state != nullptr; }
  /// valid().
  explicit operator bool() const noexcept { return valid(); }

  /// True once the fiber's function returned or threw (a racy snapshot; safe to call
  /// while the fiber runs on another thread).
  bool ready() const noexcept {
    return m_state != nullptr && m_state->m_join.load(std::memory_order_acquire) == detail::k_fiber_done;
  }

  /// Lets the fiber run on unobserved (fire-and-forget; see the class comment).
  void detach() noexcept { reset(); }

  /// What operator co_await returns (also what weft::await uses): used once by that
  /// await, on the awaiting thread (the coroutine protocol; not thread-safe).
  struct awaiter {
    fiber_handle* m_self;  ///< the handle awaited (emptied when the result is taken)
    /// True when the fiber finished already (its result is ready).
    bool await_ready() const noexcept {
      // acquire: the result (pairs with the driver's release exchange at completion)
      return m_self->m_state->m_join.load(std::memory_order_acquire) == detail::k_fiber_done;
    }
    /// Registers the awaiting coroutine `waiter`, resumed when the fiber finishes (on the
    /// executor it awaited from, if any); returns what this thread runs next (`waiter`
    /// itself when the fiber finished meanwhile).
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> waiter) noexcept {
      return m_self->m_state->register_waiter(waiter);
    }
    /// Takes the result and frees the fiber (the handle becomes empty): the function's
    /// value, or its exception rethrown.
    T await_resume() {
      struct release_state {
        detail::fiber_base* s;
        ~release_state() { delete s; }
      } guard{std::exchange(m_self->m_state, nullptr)};
      return static_cast<detail::fiber_result<T>*>(guard.s)->m_result.take();
    }
  };

  /// Waits for the fiber; its value, or its exception rethrown. Throws
  /// std::logic_error when the handle is empty or already awaited.
  awaiter operator co_await() & {
    if (m_state == nullptr) [[unlikely]]
      throw std::logic_error("weft: co_await on an empty or already-awaited fiber_handle");
    return awaiter{this};
  }
  /// Same as the lvalue form.
  awaiter operator co_await() && { return operator co_await(); }

 private:
  friend struct detail::fiber_access;
  /// Adopts a started fiber's state.
  explicit fiber_handle(detail::fiber_base* s) noexcept : m_state(s) {}
  void reset() noexcept {
    if (m_state != nullptr) std::exchange(m_state, nullptr)->abandon();
  }
  detail::fiber_base* m_state = nullptr;
};

namespace detail {
struct fiber_access {
  /// The handle that owns the started fiber `s`.
  template <class T>
  static fiber_handle<T> adopt(fiber_base* s) noexcept {
    return fiber_handle<T>{s};
  }
};
}  // namespace detail

/// Starts `fn()` (a plain function, lambda or callable; copied or moved in) as a fiber
/// on options.executor at options.priority, with its own stack of options.stack_size.
/// The fiber is queued like a forked task (it may run on any worker, and move between
/// workers at every weft::await). Returns the handle to its result; see fiber_handle
/// (dropping it is fire-and-forget). Thread-safe: callable from tasks, fibers and
/// plain threads. Throws std::out_of_range for a bad priority, std::invalid_argument
/// for a stack size outside 16 KiB .. 1 GiB, std::system_error when the stack cannot be
/// mapped, shutdown_error when the executor refuses work; nothing runs then.
template <class F>
  requires std::invocable<std::decay_t<F>&&>
auto spawn_fiber(F&& fn, const fiber_options& options = {}) {
  using Fn = std::decay_t<F>;
  using T = std::invoke_result_t<Fn&&>;
  auto* state = new detail::fiber_state<T, Fn>(std::forward<F>(fn));
  try {
    state->start(options);
  } catch (...) {
    delete state;
    throw;
  }
  return detail::fiber_access::adopt<T>(state);
}

/// True when the caller runs on a fiber (so weft::await may be called). Thread-safe.
bool in_fiber() noexcept;

/// Inside a fiber: suspends the fiber (its worker thread goes on running other work)
/// until `awaitable` completes, exactly as `co_await awaitable` would in a task, and
/// returns its result or rethrows its exception. Works with anything co_await takes:
/// tasks, weft::spawn(...) and its fork handles, fiber handles, resume_on, channel or
/// socket operations. Throws std::logic_error when the caller is not a fiber.
///
/// The fiber may continue on another thread (another worker, or another executor after
/// resume_on). weft's own state follows it, but in your code: do not keep pointers to
/// thread_local data across an await; do not hold a std::mutex across one; and know
/// that the compiler may reuse the result of a function declared
/// __attribute__((const)) (pthread_self / std::this_thread::get_id, errno's location)
/// from before the await, because it assumes a function never changes threads: call
/// such functions through something the compiler cannot see into (a volatile function
/// pointer) when the value matters after an await. Exceptions being handled (an await
/// inside a catch block) follow the fiber correctly. Called by the fiber itself only.
template <class A>
auto await(A&& awaitable)
    -> detail::await_result_t<decltype(detail::get_awaiter(std::forward<A>(awaitable)).await_resume())> {
  detail::fiber_base& self = detail::this_fiber_or_throw();
  auto&& aw = detail::get_awaiter(std::forward<A>(awaitable));
  using awaiter_type = std::remove_reference_t<decltype(aw)>;
  if (!aw.await_ready()) {
    detail::fiber_await_op op{const_cast<void*>(static_cast<const volatile void*>(std::addressof(aw))),
                              &detail::suspend_erased<awaiter_type>, nullptr};
    detail::fiber_suspend(self, op);
  }
  return aw.await_resume();
}

}  // namespace weft
