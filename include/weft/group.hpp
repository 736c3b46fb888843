// weft/group.hpp: group-shared dispatch, the GPU-workgroup shape.
//
//   co_await weft::dispatch(pool, {.members = 0, .range = n}, [&](weft::group& g) {
//     std::uint64_t partial = 0;
//     for (auto r = g.claim(64); r; r = g.claim(64))   // dynamic chunks of [0, n)
//       for (std::size_t i : r) partial += f(i);
//     auto total = g.reduce(partial, std::plus<>{});   // every member gets the sum
//   });
//
// A group is `size()` members running one plain kernel `void(weft::group&)`. They run
// at the same time: one runner per worker (the dispatching worker runs one inline, the
// others are posted at the group's priority), and each runner takes members one after
// the other. When a member waits at barrier() and members nobody took yet exist (more
// members than runners, or a posted runner still queued behind other work), the waiting
// runner starts them itself on Boost.Context fibers and switches between them at
// barrier(). So a barrier never waits for a member that cannot start, and the same
// kernel gives the same answer on 1 worker as on 64. How the runners, fibers and the
// barrier work: the protocol essay at the top of src/group.cpp (switching itself:
// src/group_runner.cpp).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <mutex>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/detail/group_state.hpp"
#include "weft/executor.hpp"

namespace weft {

/// Options of one dispatch: `{.members = 0, .priority = 1, .range = n}`. A plain value
/// (no synchronization); copied by dispatch.
struct group_options {
  /// Members of the group; 0 means one per worker of the executor (a thread_pool's
  /// thread_count(), 1 for any other executor). At most 8,388,607.
  std::size_t members = 0;
  /// Priority the runners are posted at (std::out_of_range if >= the executor's
  /// priorities()); empty: the dispatcher's current_priority(), capped at the
  /// executor's lowest priority (priorities() - 1).
  std::optional<unsigned> priority = std::nullopt;
  /// The claim space: group::claim hands out [0, range) in chunks.
  std::size_t range = 0;
  /// Stack size of the fibers that run members beyond the runners; 0: 256 KiB
  /// (1 MiB under sanitizers). Each has a guard page.
  std::size_t fiber_stack = 0;
};

/// A half-open range of indices [first, last) from group::claim; empty when the claim
/// space is exhausted. Iterable: `for (std::size_t i : r)`. A plain value (no
/// synchronization): each member uses its own.
struct index_range {
  std::size_t first = 0;  ///< the first index
  std::size_t last = 0;   ///< one past the last index

  /// A forward iterator over the indices (a plain value).
  struct iterator {
    /// An index.
    using value_type = std::size_t;
    /// A distance between indices.
    using difference_type = std::ptrdiff_t;
    std::size_t i = 0;  ///< the index it points at
    /// The index.
    std::size_t operator*() const noexcept { return i; }
    /// The next index.
    iterator& operator++() noexcept {
      ++i;
      return *this;
    }
    /// The next index; returns the previous position.
    iterator operator++(int) noexcept { return {i++}; }
    /// Same index.
    bool operator==(const iterator&) const noexcept = default;
  };

  /// Number of indices, last - first.
  std::size_t size() const noexcept { return last - first; }
  /// True when it holds no index.
  bool empty() const noexcept { return first == last; }
  /// !empty(): `for (auto r = g.claim(k); r; r = g.claim(k))`.
  explicit operator bool() const noexcept { return first != last; }
  /// Iterator to `first`.
  iterator begin() const noexcept { return {first}; }
  /// Iterator to `last`.
  iterator end() const noexcept { return {last}; }
};

/// One member's view of its group, passed to the kernel. Valid only inside that call.
/// Every operation is meant for the member it was given to: barrier(), next_phase(),
/// reduce() and broadcast() throw std::logic_error when called from anywhere else
/// (another thread, a nested group's member). claim(), index(), size() and shared()
/// are thread-safe.
///
/// After another member threw, claim() and the barrier operations throw an internal
/// cancellation (not a std::exception) that ends this member quietly; do not swallow it
/// with catch (...). Do not call barrier operations inside a catch handler: a member
/// may be switched to another fiber there.
class group {
 public:
  /// This member's index in [0, size()).
  std::size_t index() const noexcept { return m_index; }
  /// Number of members.
  std::size_t size() const noexcept { return m_state->m_size; }

  /// The group's one object of type T: the first member to ask constructs it from
  /// `args` (later calls ignore their args and return the same object); it is
  /// destroyed after the last member of the group finished, before dispatch
  /// returns. One object per type T per group. Thread-safe.
  template <class T, class... Args>
  T& shared(Args&&... args) {
    std::lock_guard lock(m_state->m_shared_mutex);
    for (const auto& e : m_state->m_shared)
      if (e.key == &detail::type_key<T>) return *static_cast<T*>(e.object);
    m_state->m_shared.reserve(m_state->m_shared.size() + 1);  // so that push_back cannot throw below
    T* object = new T(std::forward<Args>(args)...);
    m_state->m_shared.push_back({&detail::type_key<T>, object, [](void* p) noexcept { delete static_cast<T*>(p); }});
    return *object;
  }

  /// Takes the next `chunk` indices of the claim space (at most; fewer at its end), or
  /// an empty range when it is exhausted. Every index is handed out exactly once per
  /// phase. Throws std::invalid_argument for chunk == 0. Thread-safe.
  index_range claim(std::size_t chunk) {
    if (chunk == 0) detail::throw_zero_chunk();
    return m_state->claim(chunk);
  }

  /// Waits until every member that has not finished arrived here. A member that
  /// returned from the kernel no longer counts. Memory written before the barrier by
  /// any member is visible after it to all.
  void barrier() { detail::group_barrier(*m_state, *m_ctx, detail::k_no_rearm, true); }

  /// barrier(), and the claim space restarts as [0, range) for what comes after it
  /// (every member passes the same range).
  void next_phase(std::size_t range) { detail::group_barrier(*m_state, *m_ctx, range, true); }

  /// Combines the `value`s of the members that call it, with `op`, in index order
  /// (op(op(v0, v1), v2)...), and returns the result to each of them. A collective:
  /// every member that has not returned from the kernel must call it (members that
  /// returned already are left out). Each member calls it from its own kernel call
  /// only (std::logic_error otherwise, see the class comment); `op` runs on every
  /// member's thread at once, so it must be safe to call concurrently. Rethrows what
  /// `op` throws, after the second barrier.
  template <class T, class Op>
  T reduce(T value, Op op) {
    const void*& mine = m_state->m_slots[m_index];
    mine = std::addressof(value);
    barrier();
    std::optional<T> acc;
    std::exception_ptr error;
    try {
      for (const void* slot : m_state->m_slots) {
        if (slot == nullptr) continue;  // a member that finished
        if (acc)
          acc.emplace(std::invoke(op, std::move(*acc), *static_cast<const T*>(slot)));
        else
          acc.emplace(*static_cast<const T*>(slot));
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Nobody may leave (and destroy its value) while another member still reads it.
    detail::group_barrier(*m_state, *m_ctx, detail::k_no_rearm, false);
    mine = nullptr;  // read by nobody until the next collective's first barrier
    if (error) std::rethrow_exception(error);
    detail::throw_if_cancelled(*m_state);
    return std::move(*acc);
  }

  /// Returns member `root`'s `value` to every member (the others' values are ignored).
  /// A collective: every member that has not returned must call it with the same root,
  /// each from its own kernel call only (see the class comment); T is copied on every
  /// member's thread at once from root's value. Throws std::out_of_range for root >=
  /// size(), std::logic_error if `root` returned from the kernel already.
  template <class T>
  T broadcast(T value, std::size_t root = 0) {
    if (root >= size()) detail::throw_bad_root(root, size());
    const void*& slot = m_state->m_slots[root];
    if (m_index == root) slot = std::addressof(value);
    barrier();
    std::optional<T> copy;
    std::exception_ptr error;
    try {
      if (slot == nullptr) detail::throw_root_gone(root);
      copy.emplace(*static_cast<const T*>(slot));
    } catch (...) {
      error = std::current_exception();
    }
    detail::group_barrier(*m_state, *m_ctx, detail::k_no_rearm, false);
    if (m_index == root) slot = nullptr;
    if (error) std::rethrow_exception(error);
    detail::throw_if_cancelled(*m_state);
    return std::move(*copy);
  }

  group(const group&) = delete;
  group& operator=(const group&) = delete;

 private:
  friend struct detail::runner;  // makes one group for each member it runs (src/group.cpp)
  group(detail::group_state& s, std::size_t index, detail::exec_context& ctx) noexcept
      : m_state(&s), m_ctx(&ctx), m_index(index) {}
  detail::group_state* m_state;
  detail::exec_context* m_ctx;
  std::size_t m_index;
};

namespace detail {

template <class Kernel>
void call_kernel(void* kernel, group& g) {
  std::invoke(*static_cast<Kernel*>(kernel), g);
}

template <class Kernel>
constexpr void check_kernel() {
  static_assert(std::is_invocable_v<Kernel&, group&>,
                "weft::dispatch: the kernel must be callable as kernel(weft::group&)");
  static_assert(std::is_void_v<std::invoke_result_t<Kernel&, group&>>,
                "weft::dispatch: the kernel must return void (a kernel returning a task is not supported: "
                "use a plain function, and weft::dispatch_inline for nested groups)");
}

}  // namespace detail

/// The awaitable weft::dispatch returns. Await it once, from one coroutine (the
/// coroutine protocol; not thread-safe itself). Not movable: it owns the kernel the
/// members run.
template <class Kernel>
class [[nodiscard]] dispatch_awaitable {
 public:
  /// Plans the group (checks `opts` against `ex`: see weft::dispatch for the errors);
  /// nothing runs until it is awaited.
  dispatch_awaitable(executor& ex, const group_options& opts, Kernel kernel)
      : m_kernel(std::move(kernel)), m_plan(detail::plan_group(ex, opts)) {}
  dispatch_awaitable(dispatch_awaitable&&) = delete;
  /// Releases the group when an await started it but did not complete (starting threw).
  ~dispatch_awaitable() {
    if (m_state) detail::release(*m_state);
  }

  /// Never ready: the group starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Starts the group for the awaiting coroutine `h` (placement: see weft::dispatch).
  /// False (resume at once) when the inline runner finished the group last; true when
  /// the member that finishes last resumes `h`. Throws std::bad_alloc, or
  /// shutdown_error when no runner could start (nothing ran then).
  bool await_suspend(std::coroutine_handle<> h) {
    m_state = detail::make_group(m_plan, &detail::call_kernel<Kernel>, &m_kernel);
    return detail::start_group(*m_state, m_plan, h);  // may resume h elsewhere: touch nothing after
  }
  /// Releases the group; rethrows the first exception a member threw.
  void await_resume() {
    detail::group_state* s = std::exchange(m_state, nullptr);
    detail::finish_group(*s);  // releases; rethrows the first exception of a member
  }

 private:
  Kernel m_kernel;
  detail::group_plan m_plan;
  detail::group_state* m_state = nullptr;
};

/// Runs `kernel` as a group of members on `ex`; `co_await` it. Completes when every
/// member returned; then rethrows the first exception a member threw (the others stop
/// at their next claim or barrier operation). The awaiting coroutine resumes on the
/// thread of the member that finished last (or on its own executor if it awaited from
/// another one). The kernel is moved into the awaitable and runs in place.
///
/// Placement: on one of `ex`'s threads the dispatcher runs one runner inline and posts
/// min(members, workers) - 1 more at the priority; from another thread all are posted.
/// Nested: awaited from a thread that is inside a member of a group, the new group runs
/// inline on that member's thread, its members on fibers (no other worker is asked, so
/// it cannot deadlock against the outer group). Thread-safe.
///
/// Throws std::invalid_argument for more than 8,388,607 members and std::out_of_range
/// for a priority >= ex.priorities() (from dispatch() itself); shutdown_error (from
/// co_await) if `ex` no longer accepts work and no runner could start.
///
/// Barrier waits spin a bounded time, then yield, then sleep on a futex; a waiting
/// member first runs local fibers that can go on, and takes over members that no
/// runner started (at once when no posted runner is still queued, after ~2k spins
/// otherwise).
template <class Kernel>
dispatch_awaitable<std::decay_t<Kernel>> dispatch(executor& ex, group_options opts, Kernel&& kernel) {
  detail::check_kernel<std::decay_t<Kernel>>();
  return dispatch_awaitable<std::decay_t<Kernel>>(ex, opts, std::forward<Kernel>(kernel));
}

/// Runs `kernel` as a group entirely on the calling thread and returns when every
/// member returned (or rethrows the first exception). Members run one after the other;
/// one that waits at a barrier operation switches to the others, started on fibers.
/// Usable anywhere: in a plain function, inside a member of another group (the
/// nested-group form), on a worker. `opts.members == 0` means 1; `opts.priority` is
/// ignored. Thread-safe.
template <class Kernel>
void dispatch_inline(group_options opts, Kernel&& kernel) {
  detail::check_kernel<std::decay_t<Kernel>>();
  std::decay_t<Kernel> k(std::forward<Kernel>(kernel));
  detail::run_inline_group(detail::plan_inline(opts), &detail::call_kernel<std::decay_t<Kernel>>, &k);
}

}  // namespace weft
