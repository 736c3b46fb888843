// src/group_impl.hpp: what src/group.cpp (state, barrier, dispatch) and
// src/group_runner.cpp (runners, fibers, stack switching) share. Private.
//
// group_runner.cpp holds every stack switch. Under TSan it is compiled without
// instrumentation (its annotations stay on, see CMakeLists.txt): Boost.Context's
// switching templates would otherwise record function entries on one fiber's shadow
// stack and the matching exits on another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include "weft/config.hpp"
#include "weft/detail/group_state.hpp"

namespace weft::detail {

namespace bc = boost::context;

inline std::uint16_t phase_of(std::uint64_t w) noexcept { return static_cast<std::uint16_t>(w >> k_phase_shift); }
inline std::uint64_t arrived_of(std::uint64_t w) noexcept { return w & k_arrived_mask; }
inline std::uint64_t expected_of(std::uint64_t w) noexcept { return (w & k_expected_mask) >> k_expected_shift; }

/// A guarded fiber stack; under ASan its shadow is cleared before unmapping, so a
/// later stack at the same address starts clean (src/group_runner.cpp).
class stack_allocator {
 public:
  explicit stack_allocator(std::size_t size) : m_impl(size) {}
  bc::stack_context allocate() { return m_impl.allocate(); }
  void deallocate(bc::stack_context& sc) noexcept;

 private:
  bc::protected_fixedsize_stack m_impl;
};

struct runner;

/// A stack that runs members: a runner's own ("home") or one of its fibers.
struct exec_context {
  group_state* state = nullptr;
  runner* owner = nullptr;
  bc::fiber cont;  // while suspended: how to resume it
  std::uint16_t wait_phase = 0;
  bool wait_cancellable = true;
  // Sanitizer bookkeeping: the stack's bounds (home: learned at its first switch).
  void* asan_fake = nullptr;
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
  void* tsan_fiber = nullptr;
};

/// The context running a member on this thread (null outside members); src/group.cpp.
extern constinit thread_local exec_context* t_ctx;

/// One runner: runs members on its thread, on its own stack and on fibers. Lives on
/// the stack of the thread that runs it; only that thread touches it.
struct runner {
  explicit runner(group_state& s);

  group_state& st;
  exec_context home;
  std::vector<exec_context*> suspended;  // contexts waiting at a barrier
  std::uint32_t live_fibers = 0;
  exec_context* switch_from = nullptr;  // the context that switched last (null: it died)
  void* dead_tsan = nullptr;            // TSan fiber of a finished fiber, destroyed by the next one
  bool completer = false;
  stack_allocator salloc;
  const void* fiber_bottom = nullptr;  // of the fiber make_fiber made last
  std::size_t fiber_size = 0;
  void* fiber_tsan = nullptr;

  // group_runner.cpp
  /// Suspends `from` (queued as a barrier waiter if `from_waits`) and resumes `to`
  /// (already taken off the queue).
  void switch_to(exec_context& from, exec_context& to, bool from_waits = true);
  /// Queues `from` as a barrier waiter and runs member `m` on a new fiber. If no fiber
  /// can be made, the group fails with that error and `m` counts as finished.
  void start_fiber(exec_context& from, std::uint32_t m) noexcept;
  /// A queued context that can go on with the barrier word `w`, taken off the queue.
  exec_context* pop_runnable(std::uint64_t w) noexcept;
  /// Takes the next unstarted member, if any.
  bool claim_member(std::uint32_t& m) noexcept;
  void after_switch(exec_context& self) noexcept;
  bc::fiber make_fiber(bc::stack_context sc, std::uint32_t m);
  void* fiber_body(bc::fiber&& caller, std::uint32_t m, const void* bottom, std::size_t size, void* tsan);

  // group.cpp
  void run_member(exec_context& ctx, std::uint32_t m) noexcept;
  void fail_member(std::uint32_t m, std::exception_ptr e) noexcept;
  void member_done() noexcept;
};

// group_runner.cpp
/// Runs members on the calling thread until none is left to claim and its fibers are
/// done. True when it finished the group's last member.
bool run_runner(group_state& s);

// group.cpp
/// Spin, then yield, then (if `may_sleep`) sleep until the word's high half changes.
void backoff(group_state& s, std::uint64_t w, unsigned& spins, bool may_sleep) noexcept;

}  // namespace weft::detail
