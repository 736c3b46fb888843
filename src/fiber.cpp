// src/fiber.cpp: stackful fibers (Boost.Context's fcontext switch) driven by coroutines.
//
// Protocol
// --------
// A fiber is a fiber_base (include/weft/fiber.hpp): a stack, two saved contexts and a
// join word. What executors see is its *driver*, a tiny coroutine:
//
//     for (;;) { op = switch_into(fiber); if (!op) break; co_await erased{op}; }
//
// * switch_into runs on a worker's own stack, inside the driver's resume. It jumps to
//   the fiber's saved context; control comes back either because the fiber finished
//   (m_finished) or because it called weft::await, which stored a type-erased
//   await_suspend in m_op and jumped back (fiber_suspend).
// * The driver then co_awaits that operation like any coroutine would: the awaiter's
//   await_suspend gets the *driver's* handle. Whoever completes the operation resumes
//   the driver (inline by symmetric transfer, through a queue, on any worker), and the
//   driver jumps into the fiber again, on whatever thread that is. So a suspended
//   fiber migrates and is stolen exactly like a suspended task, at no extra cost to
//   the core. await_ready and await_resume run on the fiber itself.
// * When the function returned, the driver frees the stack (to a small per-thread
//   cache) and completes the join word: k_fiber_running -> k_fiber_done, or resumes
//   the coroutine registered there (by symmetric transfer, or through its own
//   executor), or frees everything when the handle was dropped (k_fiber_abandoned).
//
// Thread-local storage: a fiber can leave a thread at every await and come back on
// another, so a function must not keep a thread-local's address across a switch. The
// compiler assumes the thread never changes inside a function and may reuse a computed
// TLS address (or the result of an __attribute__((const)) accessor), so every TLS read
// here sits in a function that either does not switch or only reads TLS on the side of
// the switch that stays on one thread (the driver side of switch_into). fiber_suspend
// reads none after its jump.
//
// The C++ runtime keeps the exceptions being handled (`catch` blocks in progress, and
// std::uncaught_exceptions) per thread. A fiber awaiting inside a catch block and
// resumed elsewhere would corrupt both threads' lists, so switch_into swaps those
// globals in and out with the fiber.
//
// Sanitizers: every switch is announced (ASan: start/finish_switch_fiber, so that it
// knows which stack is live; TSan: one TSan fiber per weft fiber, switched with
// synchronisation, destroyed after the last switch out).
#include "weft/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cxxabi.h>
#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

#include "weft/detail/frame_allocator.hpp"
#include "weft/detail/worker_context.hpp"
#include "weft/pool.hpp"
#include "weft/task.hpp"

#if WEFT_ASAN
#  include <sanitizer/asan_interface.h>
#  include <sanitizer/common_interface_defs.h>
#endif
#if WEFT_TSAN
#  include <sanitizer/tsan_interface.h>
#endif

namespace weft::detail {

namespace fctx = boost::context::detail;

namespace {

constinit thread_local fiber_base* t_fiber = nullptr;  // the fiber switched in on this thread

constexpr std::size_t k_min_stack = 16 * 1024;
constexpr std::size_t k_max_stack = std::size_t{1} << 30;
constexpr std::size_t k_sanitized_stack_factor = WEFT_SANITIZED ? 4 : 1;

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// ---- stacks: mmap'ed, a PROT_NONE guard region at the low end, recycled per thread ---

constexpr std::size_t k_max_guard = std::size_t{64} << 20;

void forget_stack_contents([[maybe_unused]] void* base, [[maybe_unused]] std::size_t bytes,
                           [[maybe_unused]] std::size_t guard) noexcept {
#if WEFT_ASAN
  // Frames that never returned (the fiber's entry) leave their redzones poisoned.
  __asan_unpoison_memory_region(static_cast<char*>(base) + guard, bytes - guard);
#endif
}

void unmap_stack(void* base, std::size_t bytes, std::size_t guard) noexcept {
  forget_stack_contents(base, bytes, guard);
  ::munmap(base, bytes);
}

/// A few stacks of recently finished fibers, so that spawning one is not a syscall.
class stack_cache {
 public:
  stack_cache() = default;
  stack_cache(const stack_cache&) = delete;
  stack_cache& operator=(const stack_cache&) = delete;
  ~stack_cache() {
    for (std::size_t i = 0; i < m_count; ++i) unmap_stack(m_entries[i].base, m_entries[i].bytes, m_entries[i].guard);
  }

  void* take(std::size_t bytes, std::size_t guard) noexcept {
    for (std::size_t i = m_count; i-- > 0;) {
      if (m_entries[i].bytes == bytes && m_entries[i].guard == guard) {
        void* base = m_entries[i].base;
        m_entries[i] = m_entries[--m_count];
        return base;
      }
    }
    return nullptr;
  }

  void give(void* base, std::size_t bytes, std::size_t guard) noexcept {
    forget_stack_contents(base, bytes, guard);
    if (m_count == k_capacity) {
      unmap_stack(base, bytes, guard);
      return;
    }
    m_entries[m_count++] = {base, bytes, guard};
  }

 private:
  static constexpr std::size_t k_capacity = 16;
  struct entry {
    void* base;
    std::size_t bytes;
    std::size_t guard;
  };
  entry m_entries[k_capacity];
  std::size_t m_count = 0;
};

thread_local stack_cache t_stacks;

/// A stack of `bytes` in all, its lowest `guard` bytes inaccessible: from the cache or a
/// new mapping.
void* map_stack(std::size_t bytes, std::size_t guard) {
  if (void* base = t_stacks.take(bytes, guard)) return base;
  void* base =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    throw std::system_error(errno, std::system_category(), "weft::spawn_fiber: cannot map a fiber stack");
  if (::mprotect(base, guard, PROT_NONE) != 0) {
    const int err = errno;
    ::munmap(base, bytes);
    throw std::system_error(err, std::system_category(),
                            "weft::spawn_fiber: cannot protect a fiber stack's guard page");
  }
  return base;
}

// ---- the C++ runtime's per-thread exception-handling state -------------------------

/// Itanium C++ ABI __cxa_eh_globals (libstdc++ and libc++abi): the chain of exceptions
/// being handled and the count of uncaught ones.
struct eh_globals {
  void* m_caught;
  unsigned int m_uncaught;
};

constinit thread_local eh_globals* t_eh_globals = nullptr;  // this thread's, once looked up

/// This thread's globals. Called on the driver side of switch_into only (one thread).
eh_globals* thread_eh_globals() noexcept {
  eh_globals* g = t_eh_globals;
  if (g == nullptr) [[unlikely]] {
    g = reinterpret_cast<eh_globals*>(abi::__cxa_get_globals());
    t_eh_globals = g;
  }
  return g;
}

// ---- switching ----------------------------------------------------------------------

[[noreturn]] void fiber_entry(fctx::transfer_t from) noexcept {
  auto* f = static_cast<fiber_base*>(from.data);
  f->m_return_ctx = from.fctx;
#if WEFT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &f->m_asan_return_bottom, &f->m_asan_return_size);
#endif
  f->run_body();
  f->m_finished = true;
#if WEFT_ASAN
  __sanitizer_start_switch_fiber(nullptr, f->m_asan_return_bottom, f->m_asan_return_size);  // this stack dies
#endif
#if WEFT_TSAN
  __tsan_switch_to_fiber(f->m_tsan_return, 0);
#endif
  fctx::jump_fcontext(f->m_return_ctx, nullptr);
  std::abort();  // a finished fiber is never resumed
}

/// Driver side: runs fiber `f` on this thread until it awaits (returns the operation)
/// or finishes (frees its stack, returns nullptr). Every TLS access here happens on
/// this one thread: the jump below returns to the thread that made it.
WEFT_NOINLINE fiber_await_op* switch_into(fiber_base& f) noexcept {
  fiber_base* const outer = t_fiber;
  t_fiber = &f;
  eh_globals* const eh = thread_eh_globals();
  const eh_globals thread_eh = *eh;
  *eh = {f.m_eh_caught, f.m_eh_uncaught};
#if WEFT_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, static_cast<char*>(f.m_stack_base) + f.m_guard_bytes,
                                 f.m_stack_bytes - f.m_guard_bytes);
#endif
#if WEFT_TSAN
  f.m_tsan_return = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f.m_tsan_fiber, 0);
#endif
  const fctx::transfer_t back = fctx::jump_fcontext(f.m_fiber_ctx, &f);
#if WEFT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  f.m_fiber_ctx = back.fctx;
  f.m_eh_caught = eh->m_caught;
  f.m_eh_uncaught = eh->m_uncaught;
  *eh = thread_eh;
  t_fiber = outer;
  if (!f.m_finished) return f.m_op;
#if WEFT_TSAN
  __tsan_destroy_fiber(f.m_tsan_fiber);
  f.m_tsan_fiber = nullptr;
#endif
  t_stacks.give(f.m_stack_base, f.m_stack_bytes, f.m_guard_bytes);
  f.m_stack_base = nullptr;
  f.m_fiber_ctx = nullptr;
  return nullptr;
}

/// Completes fiber `f`'s join word after its function returned; what to run next.
std::coroutine_handle<> complete_fiber(fiber_base* f) noexcept {
  // acq_rel: release publishes the result to the handle (pairs with its acquire load or
  // CAS); acquire sees the waiter's registration (pairs with its release CAS).
  const std::uintptr_t prev = f->m_join.exchange(k_fiber_done, std::memory_order_acq_rel);
  if (prev == k_fiber_running) return take_local();
  if (prev == k_fiber_abandoned) {
    if (std::exception_ptr e = f->error()) report_fiber_exception(e);
    delete f;
    return take_local();
  }
  // The waiter frees `f` once it runs: read what we need first.
  const auto waiter = std::coroutine_handle<>::from_address(reinterpret_cast<void*>(prev));
  executor* const home = f->m_waiter_home;
  const unsigned prio = f->m_waiter_prio;
  if (home != nullptr && home != t_executor) {
    resume_at_home(*home, waiter, prio);
    return take_local();
  }
  t_prio = prio;
  return waiter;
}

// ---- the driver coroutine -------------------------------------------------------------

struct fiber_driver {
  using promise_type = fiber_driver_promise;
  fiber_driver(fiber_driver_handle h) noexcept : m_h(h) {}  // NOLINT: from get_return_object
  fiber_driver_handle m_h;
};

/// The driver's view of a fiber's pending weft::await.
struct erased_awaiter {
  fiber_await_op* m_op;
  bool await_ready() const noexcept { return false; }  // the fiber already asked
  std::coroutine_handle<> await_suspend(fiber_driver_handle driver) const noexcept {
    try {
      return m_op->m_suspend(m_op->m_awaiter, driver);
    } catch (...) {
      // As for co_await: the exception comes out of the await, with no suspension.
      m_op->m_error = std::current_exception();
      return driver;
    }
  }
  void await_resume() const noexcept {}
};

fiber_driver drive(fiber_base& f) {
  while (fiber_await_op* op = switch_into(f)) co_await erased_awaiter{op};
}

}  // namespace

fiber_driver_promise::fiber_driver_promise(fiber_base& f) noexcept
    : m_fiber(&f), m_stop(f.m_stop_token.stop_possible() ? &f.m_stop_token : nullptr) {}
void* fiber_driver_promise::operator new(std::size_t n) { return allocate_frame(n); }
void fiber_driver_promise::operator delete(void* p, std::size_t n) noexcept { deallocate_frame(p, n); }

std::coroutine_handle<> fiber_driver_promise::final_awaiter::await_suspend(fiber_driver_handle h) const noexcept {
  fiber_base* f = h.promise().m_fiber;
  h.destroy();
  return complete_fiber(f);
}

// ---- fiber_base ---------------------------------------------------------------------

void fiber_base::start(const fiber_options& options) {
  executor* ex = options.executor;
  if (ex == nullptr) ex = t_executor != nullptr ? t_executor : &default_pool();
  unsigned prio = options.priority;
  if (prio == fiber_options::k_inherit) {
    prio = t_executor == ex ? t_prio : 0;
    if (prio >= ex->priorities()) prio = ex->priorities() - 1;
  } else {
    check_priority(*ex, prio, "weft::spawn_fiber");
  }
  if (options.stack_size < k_min_stack || options.stack_size > k_max_stack)
    throw std::invalid_argument("weft::spawn_fiber: fiber_options::stack_size must be in 16 KiB .. 1 GiB (got " +
                                std::to_string(options.stack_size) + " bytes)");
  if (options.guard_size > k_max_guard)
    throw std::invalid_argument("weft::spawn_fiber: fiber_options::guard_size must be at most 64 MiB (got " +
                                std::to_string(options.guard_size) + " bytes)");
  const std::size_t page = page_size();
  const std::size_t usable = (options.stack_size * k_sanitized_stack_factor + page - 1) / page * page;
  const std::size_t guard = std::max(page, (options.guard_size + page - 1) / page * page);
  m_stack_bytes = usable + guard;
  m_guard_bytes = guard;
  m_stack_base = map_stack(m_stack_bytes, guard);
  m_fiber_ctx = fctx::make_fcontext(static_cast<char*>(m_stack_base) + m_stack_bytes, usable, &fiber_entry);
#if WEFT_TSAN
  m_tsan_fiber = __tsan_create_fiber(0);
#endif
  m_executor = ex;
  m_prio = prio;
  m_stop_token = options.stop_token;
  const fiber_driver d = drive(*this);  // may throw bad_alloc: ~fiber_base cleans up
  try {
    ex->schedule(d.m_h, prio);
  } catch (...) {
    d.m_h.destroy();
    throw;
  }
  // From here on the fiber may already be running, or finished: `this` belongs to it.
}

std::coroutine_handle<> fiber_base::register_waiter(std::coroutine_handle<> waiter) noexcept {
  m_waiter_home = t_executor;
  m_waiter_prio = t_prio;
  std::uintptr_t expected = k_fiber_running;
  // release: the two fields above and the waiter's state reach the completer (pairs with
  // its acquire exchange); acquire on failure: the result (pairs with its release).
  if (!m_join.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(waiter.address()),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
    return waiter;  // finished meanwhile
  return take_local();
}

void fiber_base::abandon() noexcept {
  // acq_rel: pairs with complete_fiber's exchange, whichever comes second frees.
  if (m_join.exchange(k_fiber_abandoned, std::memory_order_acq_rel) == k_fiber_done) {
    if (std::exception_ptr e = error()) report_fiber_exception(e);
    delete this;
  }
}

fiber_base::~fiber_base() {
  // Only a fiber that never ran still owns its stack (spawn_fiber failed to queue it).
#if WEFT_TSAN
  if (m_tsan_fiber != nullptr) __tsan_destroy_fiber(m_tsan_fiber);
#endif
  if (m_stack_base != nullptr) unmap_stack(m_stack_base, m_stack_bytes, m_guard_bytes);
}

// ---- weft::await support ----------------------------------------------------------------

WEFT_NOINLINE fiber_base& this_fiber_or_throw() {
  if (fiber_base* f = t_fiber) return *f;
  throw std::logic_error(
      "weft::await: called outside a fiber (start the code with weft::spawn_fiber, or co_await in a coroutine)");
}

WEFT_NOINLINE void fiber_suspend(fiber_base& f, fiber_await_op& op) {
  f.m_op = &op;
#if WEFT_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.m_asan_return_bottom, f.m_asan_return_size);
#endif
#if WEFT_TSAN
  __tsan_switch_to_fiber(f.m_tsan_return, 0);
#endif
  const fctx::transfer_t back = fctx::jump_fcontext(f.m_return_ctx, nullptr);
  // Resumed, maybe on another thread: no thread-local storage below this line.
  f.m_return_ctx = back.fctx;
#if WEFT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &f.m_asan_return_bottom, &f.m_asan_return_size);
#endif
  if (op.m_error) std::rethrow_exception(std::exchange(op.m_error, nullptr));
}

void report_fiber_exception(std::exception_ptr e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "weft: a detached fiber ended with an exception: %s\n", ex.what());
  } catch (...) {
    std::fprintf(stderr, "weft: a detached fiber ended with a non-standard exception\n");
  }
}

// Out-of-line thread-local reads for code on a fiber's stack (weft/executor.hpp).
WEFT_NOINLINE executor* read_t_executor() noexcept { return t_executor; }
WEFT_NOINLINE worker_context* read_t_worker() noexcept { return t_worker; }
WEFT_NOINLINE unsigned read_t_prio() noexcept { return t_prio; }

}  // namespace weft::detail

namespace weft {

bool in_fiber() noexcept { return detail::t_fiber != nullptr; }

}  // namespace weft
