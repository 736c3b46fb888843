// src/group_runner.cpp: a group's runners and their member fibers; every stack switch
// of weft::dispatch happens here (the protocol: top of src/group.cpp).
//
// A runner runs members on its thread: on its own stack ("home") one after the other,
// and, when a member waits at a barrier while unstarted members exist, on Boost.Context
// fibers (guarded stacks) that it creates and switches between. Fibers never migrate:
// home waits until its fibers are done. Switches happen only at barrier waits and when
// a fiber's members are done (it returns to home, which rechecks what it waited for).
//
// Sanitizers: ASan is told about every switch (start/finish_switch_fiber; a dying
// fiber passes no fake-stack slot); TSan gets a fiber per stack (create/switch_to/
// destroy, the dead one destroyed by whoever runs next). Under TSan this file is built
// without instrumentation (CMakeLists.txt) so that no instrumented function straddles
// a switch; the code here touches only runner-local state and relaxed counters.
#include "group_impl.hpp"

#include <algorithm>
#include <utility>

#if WEFT_ASAN
#  include <sanitizer/asan_interface.h>
#  include <sanitizer/common_interface_defs.h>
#endif
#if WEFT_TSAN
#  include <sanitizer/tsan_interface.h>
#endif

namespace weft::detail {

void stack_allocator::deallocate(bc::stack_context& sc) noexcept {
#if WEFT_ASAN
  ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(sc.sp) - sc.size, sc.size);
#endif
  m_impl.deallocate(sc);
}

runner::runner(group_state& s) : st(s), salloc(s.m_stack_size) {
  home.state = &s;
  home.owner = this;
#if WEFT_TSAN
  home.tsan_fiber = __tsan_get_current_fiber();
#endif
}

namespace {

/// Announces a switch from `from` (null: it dies) to the stack [bottom, bottom + size)
/// of TSan fiber `tsan`. The caller switches right after.
void announce_switch(runner& r, exec_context* from, void* dying_tsan, const void* bottom, std::size_t size,
                     void* tsan) noexcept {
#if WEFT_ASAN
  __sanitizer_start_switch_fiber(from != nullptr ? &from->asan_fake : nullptr, bottom, size);
#else
  (void)bottom, (void)size;
#endif
#if WEFT_TSAN
  if (from == nullptr) r.dead_tsan = dying_tsan;
  __tsan_switch_to_fiber(tsan, 0);
#else
  (void)dying_tsan, (void)tsan;
#endif
  r.switch_from = from;
}

/// A fiber's entry: runs its members, then returns home (the stack is freed after the
/// switch by Boost.Context).
struct fiber_main {
  runner* r;
  std::uint32_t m;
  const void* bottom;
  std::size_t size;
  bc::fiber operator()(bc::fiber&& caller) const {
    void* const mine = r->fiber_body(std::move(caller), m, bottom, size, r->fiber_tsan);
    bc::fiber to = std::move(r->home.cont);
    announce_switch(*r, nullptr, mine, r->home.stack_bottom, r->home.stack_size, r->home.tsan_fiber);
    return to;
  }
};

}  // namespace

void runner::after_switch(exec_context& self) noexcept {
#if WEFT_ASAN
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(self.asan_fake, &bottom, &size);
  if (switch_from != nullptr && switch_from->stack_bottom == nullptr) {  // home learns its bounds
    switch_from->stack_bottom = bottom;
    switch_from->stack_size = size;
  }
#endif
#if WEFT_TSAN
  if (dead_tsan != nullptr) {
    __tsan_destroy_fiber(dead_tsan);
    dead_tsan = nullptr;
  }
#endif
  t_ctx = &self;
}

void runner::switch_to(exec_context& from, exec_context& to, bool from_waits) {
  if (from_waits) suspended.push_back(&from);
  bc::fiber target = std::move(to.cont);
  announce_switch(*this, &from, nullptr, to.stack_bottom, to.stack_size, to.tsan_fiber);
  (void)std::move(target).resume_with([this](bc::fiber&& caller) -> bc::fiber {
    switch_from->cont = std::move(caller);
    return {};
  });
  after_switch(from);
}

void runner::start_fiber(exec_context& from, std::uint32_t m) noexcept {
  bc::fiber f;
  bc::stack_context sc{};
  try {
    sc = salloc.allocate();
    f = make_fiber(sc, m);
  } catch (...) {
    if (sc.sp != nullptr) salloc.deallocate(sc);
    fail_member(m, std::current_exception());
    return;
  }
  suspended.push_back(&from);
  ++live_fibers;
  announce_switch(*this, &from, nullptr, fiber_bottom, fiber_size, fiber_tsan);
  (void)std::move(f).resume();
  after_switch(from);
}

bc::fiber runner::make_fiber(bc::stack_context sc, std::uint32_t m) {
  const void* bottom = static_cast<char*>(sc.sp) - sc.size;
  const std::size_t size = sc.size;
  bc::fiber f(std::allocator_arg, bc::preallocated(sc.sp, sc.size, sc), salloc, fiber_main{this, m, bottom, size});
  void* tsan = nullptr;
#if WEFT_TSAN
  tsan = __tsan_create_fiber(0);  // last: nothing can throw after it
#endif
  fiber_bottom = bottom;
  fiber_size = size;
  fiber_tsan = tsan;  // read by the fiber's first instructions, before any other fiber is made
  return f;
}

void* runner::fiber_body(bc::fiber&& caller, std::uint32_t m, const void* bottom, std::size_t size, void* tsan) {
  exec_context self;
  self.state = &st;
  self.owner = this;
  self.stack_bottom = bottom;
  self.stack_size = size;
  self.tsan_fiber = tsan;
  after_switch(self);
  switch_from->cont = std::move(caller);
  run_member(self, m);
  std::uint32_t next = 0;
  while (claim_member(next)) run_member(self, next);
  --live_fibers;
  std::erase(suspended, &home);  // home may be queued as a barrier waiter: it rechecks on resume
  return self.tsan_fiber;
}

exec_context* runner::pop_runnable(std::uint64_t w) noexcept {
  for (std::size_t i = 0; i < suspended.size(); ++i) {
    exec_context* c = suspended[i];
    if (phase_of(w) != c->wait_phase || (c->wait_cancellable && (w & k_cancel_bit) != 0)) {
      suspended[i] = suspended.back();
      suspended.pop_back();
      return c;
    }
  }
  return nullptr;
}

bool runner::claim_member(std::uint32_t& m) noexcept {
  if (st.m_next_member.load(std::memory_order_relaxed) >= st.m_size) return false;
  m = st.m_next_member.fetch_add(1, std::memory_order_relaxed);
  return m < st.m_size;
}

bool run_runner(group_state& s) {
  runner r(s);
  exec_context* const saved = t_ctx;
  t_ctx = &r.home;
  unsigned spins = 0;
  for (;;) {
    const std::uint64_t w = s.m_barrier.load(std::memory_order_acquire);
    if (exec_context* c = r.pop_runnable(w)) {
      r.switch_to(r.home, *c, false);  // home is no barrier waiter here
      spins = 0;
      continue;
    }
    std::uint32_t m = 0;
    if (r.claim_member(m)) {
      r.run_member(r.home, m);
      spins = 0;
      continue;
    }
    if (r.live_fibers == 0) break;
    backoff(s, w, spins, true);  // every fiber waits at a barrier for other runners
  }
  t_ctx = saved;
  return r.completer;
}

}  // namespace weft::detail
