// src/group.cpp: group-shared dispatch (weft/group.hpp): the group's state, claims,
// the barrier, starting and completing a group. The runners and their member fibers
// (every stack switch) are in src/group_runner.cpp.
//
// Protocol
// --------
// * Members are claimed, not assigned. A group of M members on an executor of W
//   workers gets R = min(M, W) runners: the dispatching worker runs one inline (inside
//   the awaiter's await_suspend), R - 1 are posted at the group's priority (then
//   before_blocking() publishes them to thieves, since the inline runner keeps this
//   worker busy). A runner takes the next unclaimed member index (m_next_member) and
//   runs the kernel for it on its own stack, then the next, until none is left.
// * Barrier word (m_barrier, 64 bits): arrived | expected | cancelled | phase. A member
//   arrives with a CAS (+1). The one whose arrival makes arrived == expected is the
//   completer: it applies a pending next_phase() re-arm of the claim space, then a
//   second CAS sets arrived = 0 and phase + 1, unless the cancel bit is set. A member
//   that returns from the kernel drops out (expected - 1, completing the phase if that
//   makes it full). So a phase completes exactly when every live member arrived, and
//   once the cancel bit is set no cancellable phase completes any more: a waiter that
//   sees its phase still current and the bit set can throw without anybody else
//   passing that barrier (and reading its reduce slot). reduce/broadcast's second
//   barrier is uncancellable: it waits until every member that passed the first one
//   stopped reading, whatever happened.
// * Waiting: a member waiting at a barrier first switches to a local fiber that can run
//   (its own phase passed, or it can throw), else, if unclaimed members exist, starts
//   one on a new fiber (right away when no posted runner is still queued, after a short
//   patience otherwise: that runner would run it in parallel), else spins, yields and
//   finally sleeps on a futex on the word's high half (phase and cancel bit live
//   there). A completer or canceller wakes sleepers when m_sleepers says there are any
//   (seq_cst on both sides: the sleeper registers then re-reads, the waker writes then
//   reads the count). No barrier ever waits for a member that nobody can start, so the
//   group progresses whatever the other workers do, including with 1 worker.
// * Fibers are Boost.Context fibers with guarded stacks, owned by one runner and never
//   migrating. They switch only at barrier operations and when a fiber's members are
//   done (it returns to the runner's own stack, "home", which waits until its fibers
//   are done too). Under ASan and TSan every switch is annotated (group_runner.cpp).
// * Completion: m_remaining counts unfinished members; the member that takes it to 0
//   destroys the shared objects and makes its runner the completer. A posted completer
//   resumes the awaiting coroutine by symmetric transfer (or on its home executor); an
//   inline completer makes await_suspend return false. m_refs (awaiter + every runner)
//   keeps the state alive for runners that start after the group finished.
#include <sched.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <stdexcept>
#include <string>

#include "futex.hpp"
#include "group_impl.hpp"
#include "weft/config.hpp"
#include "weft/detail/spin_lock.hpp"
#include "weft/group.hpp"
#include "weft/pool.hpp"
#include "weft/task.hpp"

namespace weft::detail {

constinit thread_local exec_context* t_ctx = nullptr;

static_assert(std::endian::native == std::endian::little, "the barrier futex is the word's high half");

namespace {

constexpr unsigned k_spins = 2048;        // pause rounds before yielding
constexpr unsigned k_yields = 64;         // sched_yield rounds before sleeping
constexpr unsigned k_patience = k_spins;  // before taking over a member a queued runner would run
constexpr std::size_t k_default_stack = WEFT_SANITIZED ? (std::size_t{1} << 20) : (std::size_t{256} << 10);

std::uint32_t* futex_word(group_state& s) noexcept {
  return reinterpret_cast<std::uint32_t*>(&s.m_barrier) + 1;  // the high half: phase and cancel bit
}

void futex_wait_high(group_state& s, std::uint32_t expected) noexcept {
  const timespec limit{0, 10'000'000};  // 10 ms: a bound, not a protocol need
  futex_wait(futex_word(s), expected, &limit);
}

void wake_sleepers(group_state& s) noexcept {
  // seq_cst: pairs with the sleeper's seq_cst increment and re-read in backoff().
  if (s.m_sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(futex_word(s), INT_MAX);
}

}  // namespace

void backoff(group_state& s, std::uint64_t w, unsigned& spins, bool may_sleep) noexcept {
  ++spins;
  if (spins < k_spins) {
    cpu_relax();
  } else if (spins < k_spins + k_yields || !may_sleep) {
    sched_yield();
  } else {
    const auto high = static_cast<std::uint32_t>(w >> 32);
    s.m_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (static_cast<std::uint32_t>(s.m_barrier.load(std::memory_order_seq_cst) >> 32) == high) futex_wait_high(s, high);
    s.m_sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

// ---- the barrier ---------------------------------------------------------------------

namespace {

void fail(group_state& s, std::exception_ptr e) noexcept {
  if (!s.m_failed.exchange(true, std::memory_order_acq_rel)) s.m_error = std::move(e);
  s.m_barrier.fetch_or(k_cancel_bit, std::memory_order_seq_cst);
  wake_sleepers(s);
}

/// The word is full (arrived == expected): re-arm the claim space if asked, then open
/// the next phase. False (nothing changed) when cancelled and `cancellable`.
bool complete_phase(group_state& s, bool cancellable) noexcept {
  const std::size_t rearm = s.m_rearm.load(std::memory_order_relaxed);  // ordered by the arrival CASes
  if (rearm != k_no_rearm) {
    s.m_range_end.store(rearm, std::memory_order_relaxed);  // published by the CAS below
    s.m_next_index.store(0, std::memory_order_relaxed);
    s.m_rearm.store(k_no_rearm, std::memory_order_relaxed);
  }
  std::uint64_t w = s.m_barrier.load(std::memory_order_relaxed);
  for (;;) {
    if (cancellable && (w & k_cancel_bit) != 0) return false;
    const std::uint64_t nw = (w & ~k_arrived_mask) + (std::uint64_t{1} << k_phase_shift);
    // seq_cst: release publishes every member's pre-barrier writes (carried by the
    // arrival CASes) to the waiters' acquire loads; and orders before wake_sleepers.
    if (s.m_barrier.compare_exchange_weak(w, nw, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
  }
  wake_sleepers(s);
  return true;
}

/// A member returned from the kernel: it no longer counts at barriers.
void drop(group_state& s) noexcept {
  std::uint64_t w = s.m_barrier.load(std::memory_order_relaxed);
  std::uint64_t nw = 0;
  do {
    nw = w - (std::uint64_t{1} << k_expected_shift);
  } while (!s.m_barrier.compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (arrived_of(nw) != 0 && arrived_of(nw) == expected_of(nw)) (void)complete_phase(s, true);
}

/// Waits (switching to local fibers, starting unclaimed members) until `phase` passed.
void wait_phase(group_state& s, exec_context& ctx, std::uint16_t phase, bool cancellable) {
  runner& r = *ctx.owner;
  unsigned spins = 0;
  for (;;) {
    const std::uint64_t w = s.m_barrier.load(std::memory_order_acquire);  // pairs with complete_phase
    if (phase_of(w) != phase) return;
    if (cancellable && (w & k_cancel_bit) != 0) throw group_cancelled{};
    ctx.wait_phase = phase;
    ctx.wait_cancellable = cancellable;
    if (exec_context* next = r.pop_runnable(w)) {
      r.switch_to(ctx, *next);
      spins = 0;
      continue;
    }
    const bool claimable = s.m_next_member.load(std::memory_order_relaxed) < s.m_size;
    if (claimable && (s.m_pending_runners.load(std::memory_order_relaxed) == 0 || spins >= k_patience)) {
      std::uint32_t m = 0;
      if (r.claim_member(m)) {
        r.start_fiber(ctx, m);
        spins = 0;
      }
      continue;
    }
    backoff(s, w, spins, !claimable);
  }
}

}  // namespace

void group_barrier(group_state& s, exec_context& ctx, std::size_t rearm, bool cancellable) {
  if (t_ctx != &ctx)
    throw std::logic_error(
        "weft::group: barrier/next_phase/reduce/broadcast called outside the member's own kernel "
        "(from another thread, or from a member of a nested group)");
  if (rearm != k_no_rearm) s.m_rearm.store(rearm, std::memory_order_relaxed);  // published by the CAS below
  std::uint64_t w = s.m_barrier.load(std::memory_order_relaxed);
  for (;;) {
    if (cancellable && (w & k_cancel_bit) != 0) throw group_cancelled{};
    // acq_rel: release carries this member's writes to the completer; acquire takes the
    // earlier arrivals' writes along the chain.
    if (s.m_barrier.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  if (arrived_of(w) + 1 == expected_of(w)) {
    if (!complete_phase(s, cancellable)) throw group_cancelled{};
    return;
  }
  wait_phase(s, ctx, phase_of(w), cancellable);
}

void throw_if_cancelled(const group_state& s) {
  if ((s.m_barrier.load(std::memory_order_acquire) & k_cancel_bit) != 0) throw group_cancelled{};
}

void throw_zero_chunk() { throw std::invalid_argument("weft::group::claim: chunk must be at least 1"); }

void throw_root_gone(std::size_t root) {
  throw std::logic_error("weft::group::broadcast: root " + std::to_string(root) + " returned from the kernel already");
}

void throw_bad_root(std::size_t root, std::size_t size) {
  throw std::out_of_range("weft::group::broadcast: root " + std::to_string(root) + " is not a member (size " +
                          std::to_string(size) + ")");
}

// ---- members and runners -------------------------------------------------------------

void runner::run_member(exec_context& ctx, std::uint32_t m) noexcept {
  {
    group g(st, m, ctx);
    try {
      st.m_call(st.m_kernel, g);
    } catch (const group_cancelled&) {
      // another member failed; its exception is the one reported
    } catch (...) {
      fail(st, std::current_exception());
    }
  }
  member_done();
}

void runner::fail_member(std::uint32_t, std::exception_ptr e) noexcept {
  fail(st, std::move(e));
  member_done();
}

void runner::member_done() noexcept {
  drop(st);
  // acq_rel: the last one sees every member's writes (results, m_error) before completing.
  if (st.m_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    for (auto it = st.m_shared.rbegin(); it != st.m_shared.rend(); ++it) it->destroy(it->object);
    st.m_shared.clear();
    completer = true;
  }
}

namespace {

/// The coroutine a posted runner is: runs run_runner, then hands the thread on.
struct runner_task {
  struct promise_type {
    std::coroutine_handle<> m_next;
    runner_task get_return_object() noexcept { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    auto final_suspend() const noexcept {
      struct hand_on {
        bool await_ready() const noexcept { return false; }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
          const std::coroutine_handle<> next = h.promise().m_next;
          h.destroy();
          return next;
        }
        void await_resume() const noexcept {}
      };
      return hand_on{};
    }
    void return_void() const noexcept {}
    void unhandled_exception() const noexcept { std::terminate(); }  // run_runner does not throw
  };
  std::coroutine_handle<promise_type> m_h;
};

struct own_promise {
  runner_task::promise_type* p = nullptr;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<runner_task::promise_type> h) noexcept {
    p = &h.promise();
    return false;
  }
  runner_task::promise_type& await_resume() const noexcept { return *p; }
};

runner_task posted_runner(group_state* s) {
  runner_task::promise_type& self = co_await own_promise{};
  s->m_pending_runners.fetch_sub(1, std::memory_order_relaxed);
  if (run_runner(*s)) {
    const std::coroutine_handle<> h = s->m_awaiting;
    executor* const home = s->m_home;
    const unsigned prio = s->m_home_prio;
    release(*s);  // the awaiter still holds one
    if (home != nullptr && home != t_executor) {
      resume_at_home(*home, h, prio);
      self.m_next = take_local();
    } else {
      t_prio = prio;
      self.m_next = h;
    }
  } else {
    release(*s);
    self.m_next = take_local();
  }
}

std::uint32_t workers_of(const executor& ex) noexcept {
  if (const auto* pool = dynamic_cast<const thread_pool*>(&ex)) return static_cast<std::uint32_t>(pool->thread_count());
  return 1;
}

std::uint32_t checked_members(std::size_t members, const char* what) {
  if (members > k_max_members)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(members) + " members is more than the " +
                                std::to_string(k_max_members) + " supported");
  return static_cast<std::uint32_t>(members);
}

}  // namespace

// ---- group_state -------------------------------------------------------------------------

group_state::group_state(const group_plan& plan, kernel_fn fn, void* kernel)
    : m_size(plan.members),
      m_call(fn),
      m_kernel(kernel),
      m_stack_size(plan.fiber_stack != 0 ? plan.fiber_stack : k_default_stack),
      m_remaining(plan.members),
      m_range_end(plan.range),
      m_barrier(std::uint64_t{plan.members} << k_expected_shift),
      m_slots(plan.members, nullptr) {}

group_state::~group_state() {
  for (auto it = m_shared.rbegin(); it != m_shared.rend(); ++it) it->destroy(it->object);  // not started at all
}

index_range group_state::claim(std::size_t chunk) {
  if ((m_barrier.load(std::memory_order_relaxed) & k_cancel_bit) != 0) throw group_cancelled{};
  const std::size_t end = m_range_end.load(std::memory_order_relaxed);  // set before this phase began
  if (m_next_index.load(std::memory_order_relaxed) >= end) return {};
  chunk = std::min(chunk, end);  // keeps the cursor far from overflow
  // relaxed: only atomicity matters; the work's results travel through barriers.
  const std::size_t first = m_next_index.fetch_add(chunk, std::memory_order_relaxed);
  if (first >= end) return {};
  return {first, end - first < chunk ? end : first + chunk};
}

// ---- dispatch ------------------------------------------------------------------------

group_plan plan_group(executor& ex, const group_options& opts) {
  group_plan p;
  p.ex = &ex;
  p.workers = workers_of(ex);
  p.members = opts.members == 0 ? p.workers : checked_members(opts.members, "weft::dispatch");
  if (opts.priority) {
    check_priority(ex, *opts.priority, "weft::dispatch");
    p.prio = *opts.priority;
  } else {
    p.prio = std::min(current_priority(), ex.priorities() - 1);
  }
  p.range = opts.range;
  p.fiber_stack = opts.fiber_stack;
  return p;
}

group_plan plan_inline(const group_options& opts) {
  group_plan p;
  p.members = opts.members == 0 ? 1 : checked_members(opts.members, "weft::dispatch_inline");
  p.range = opts.range;
  p.fiber_stack = opts.fiber_stack;
  return p;
}

group_state* make_group(const group_plan& plan, kernel_fn fn, void* kernel) {
  return new group_state(plan, fn, kernel);
}

void release(group_state& s) noexcept {
  // acq_rel: the last owner sees every other owner's last use.
  if (s.m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete &s;
}

bool start_group(group_state& s, const group_plan& plan, std::coroutine_handle<> awaiting) {
  executor& ex = *plan.ex;
  const unsigned prio = plan.prio;
  const bool nested = t_ctx != nullptr;
  const bool inline_runner = nested || ex.owns_current_thread();
  const std::uint32_t runners = nested ? 1 : std::min(plan.members, plan.workers);
  std::uint32_t posted = runners - (inline_runner ? 1 : 0);
  s.m_awaiting = awaiting;
  s.m_home = current_executor();
  s.m_home_prio = current_priority();
  s.m_refs.store(1 + runners, std::memory_order_relaxed);
  s.m_pending_runners.store(posted, std::memory_order_relaxed);

  // Make every frame first (may throw bad_alloc), then queue them.
  std::vector<runner_task> tasks;
  try {
    tasks.reserve(posted);
    for (std::uint32_t i = 0; i < posted; ++i) tasks.push_back(posted_runner(&s));
  } catch (...) {
    for (auto& t : tasks) t.m_h.destroy();
    s.m_refs.store(1, std::memory_order_relaxed);  // the awaiter's
    throw;
  }
  std::uint32_t queued = 0;
  try {
    for (; queued < posted; ++queued) ex.schedule(tasks[queued].m_h, prio);
  } catch (...) {
    const std::uint32_t missing = posted - queued;
    for (std::uint32_t i = queued; i < posted; ++i) tasks[i].m_h.destroy();
    if (queued == 0 && !inline_runner) {
      s.m_refs.store(1, std::memory_order_relaxed);
      throw;  // nothing runs: the error reaches the awaiting coroutine
    }
    // Fewer runners than planned: the others and the inline one claim every member.
    s.m_pending_runners.fetch_sub(missing, std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < missing; ++i) release(s);
    posted = queued;
  }
  if (!inline_runner) return true;        // the last member resumes `awaiting`; touch nothing
  if (posted != 0) ex.before_blocking();  // this worker is busy now: let thieves see the runners

  const unsigned saved = t_prio;
  t_prio = prio;
  const bool completer = run_runner(s);
  t_prio = saved;
  release(s);  // the inline runner's reference; the awaiter still holds one
  return !completer;
}

void finish_group(group_state& s) {
  std::exception_ptr e = std::move(s.m_error);
  release(s);
  if (e) std::rethrow_exception(e);
}

void run_inline_group(const group_plan& plan, kernel_fn fn, void* kernel) {
  group_state s(plan, fn, kernel);
  s.m_refs.store(1, std::memory_order_relaxed);
  (void)run_runner(s);
  if (s.m_error) std::rethrow_exception(s.m_error);
}

}  // namespace weft::detail
