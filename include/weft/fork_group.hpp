// weft/fork_group.hpp: a dynamic number of forks joined together.
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/bulk.hpp"
#include "weft/detail/fork.hpp"
#include "weft/task.hpp"

namespace weft {

/// Forks tasks one at a time (each is stealable as soon as fork() returns) and joins
/// them all at once: `co_await g.join()` evaluates to std::vector<T> in fork order
/// and rethrows the first (lowest-index) exception after every child finished. A
/// child's frame (its result, its locals) lives until the join; fork_group<void>
/// (below) frees each child as it finishes instead. Not thread-safe: use it from the
/// task that owns it. A group destroyed with children not joined detaches them (they
/// run on; exceptions go to stderr).
template <class T = void>
class fork_group {
 public:
  /// An empty group.
  fork_group() = default;
  fork_group(const fork_group&) = delete;
  fork_group& operator=(const fork_group&) = delete;
  /// Detaches every child not joined (see the class comment).
  ~fork_group() {
    for (auto& t : m_tasks) detail::abandon_child(detail::release_task(t));
  }

  /// Queues `t` to run in parallel with the caller. Throws std::logic_error for an
  /// empty task, std::bad_alloc; called off a pool worker, also what queueing on the
  /// executor throws (weft::shutdown_error). If it throws, `t` was not queued.
  void fork(task<T> t) {
    if (!t.valid()) [[unlikely]]
      detail::throw_bad_await("weft::fork_group::fork: empty or moved-from task");
    // Grow first (geometrically), so that nothing can throw once the child is queued.
    if (m_tasks.size() == m_tasks.capacity()) m_tasks.reserve(m_tasks.empty() ? 16 : 2 * m_tasks.size());
    auto h = detail::task_handle(t);
    h.promise().m_mode = detail::completion::forked;
    detail::enqueue_child(h.promise(), h, detail::k_inherit_priority, nullptr);  // t still frees it if this throws
    m_tasks.push_back(std::move(t));
  }

  /// fork(std::invoke(fn, args...)): the task fn returns, forked as above (fn's own
  /// exceptions propagate, nothing queued). With a function object, clang inlines the
  /// child's frame set-up into the caller (see weft::spawn(fn, args...)).
  template <class F, class... A>
    requires std::invocable<F, A...> && std::same_as<std::invoke_result_t<F, A...>, task<T>>
  void fork(F&& fn, A&&... args) {
    fork(std::invoke(std::forward<F>(fn), std::forward<A>(args)...));
  }

  /// Number of children forked and not yet joined.
  std::size_t size() const noexcept { return m_tasks.size(); }

  /// Waits for every child; see the class comment. The group is empty afterwards and
  /// can be reused.
  auto join() -> task<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> {
    std::vector<task<T>> ts = std::move(m_tasks);
    m_tasks.clear();
    for (std::size_t i = ts.size(); i-- > 0;) co_await detail::join_awaiter{detail::task_handle(ts[i])};
    co_return detail::collect<T>(ts);
  }

 private:
  std::vector<task<T>> m_tasks;
};

namespace detail {

/// The state a fork_group<void> shares with its children (src/fork_group.cpp). Heap-
/// allocated: children that a destroyed group detached still report to it.
///
/// m_count is the children not finished plus one reference of the group's own, dropped
/// when it suspends in join() (after storing m_joiner) or when it is destroyed (after
/// setting m_abandoned). Whoever takes it to zero acts: the last child resumes the
/// joiner on its executor, or frees the state of a destroyed group; the group, if the
/// children were all done, goes on without suspending. acq_rel on every decrement:
/// the joiner's fields and the children's results are published by the decrement
/// before theirs and seen by the one that reaches zero.
struct reap_state {
  std::atomic<std::size_t> m_count{1};
  std::coroutine_handle<> m_joiner;  // the task awaiting join()
  executor* m_home = nullptr;        // where it resumes
  unsigned m_prio = 0;               // at its priority
  std::size_t m_forked = 0;          // the group's thread only: fork indices
  std::mutex m_mutex;                // guards the three below
  std::exception_ptr m_error;        // the lowest-index exception so far
  std::size_t m_error_index = 0;
  bool m_abandoned = false;  // the group was destroyed; errors go to stderr
};

/// A child finished (its frame already freed): records `error` (lowest index wins, or
/// stderr once the group is gone) and drops its count, resuming the joiner or freeing
/// the state when it is the last. Never throws.
void reap_child_done(reap_state* st, std::size_t index, std::exception_ptr error) noexcept;
/// join()'s suspension: stores `joiner` and the executor and priority it runs at, then
/// drops the group's count; false when every child had finished already (do not suspend).
bool reap_join_suspend(reap_state* st, std::coroutine_handle<> joiner) noexcept;
/// The group is destroyed: later errors go to stderr, an unjoined one now; drops the
/// group's count (the last child frees the state, or this call does).
void reap_abandon(reap_state* st) noexcept;

/// A child of fork_group<void>: runs `t`, frees its frame at once, then reports.
inline task<void> reaped_child(task<void> t, reap_state* st, std::size_t index) {
  std::exception_ptr error;
  try {
    co_await std::move(t);
  } catch (...) {
    error = std::current_exception();
  }
  t = task<void>{};  // the child's locals (a connection's socket, say) go before the group hears
  reap_child_done(st, index, std::move(error));
}

}  // namespace detail

/// fork_group<void>, for a dynamic number of children whose results nobody keeps (a
/// server's connection tasks): as fork_group<T>, except that each child's frame, and
/// so everything its coroutine owns, is freed as soon as it finishes, so memory and
/// descriptors are bounded by the children alive, not by the children ever forked.
/// `co_await g.join()` waits for those still running, then rethrows the lowest-index
/// exception (by fork order since the last join), if any. Not thread-safe: use it from
/// the task that owns it. A group destroyed with children running detaches them (they
/// run on; their exceptions, and one not joined, go to stderr).
template <>
class fork_group<void> {
 public:
  /// An empty group (allocates nothing until the first fork).
  fork_group() = default;
  fork_group(const fork_group&) = delete;
  fork_group& operator=(const fork_group&) = delete;
  /// Detaches every child still running (see the class comment).
  ~fork_group() {
    if (m_state != nullptr) detail::reap_abandon(m_state);
  }

  /// Queues `t` to run in parallel with the caller. Throws std::logic_error for an
  /// empty task, std::bad_alloc; called off a pool worker, also what queueing on the
  /// executor throws (weft::shutdown_error). If it throws, `t` was not queued.
  void fork(task<void> t) {
    if (!t.valid()) [[unlikely]]
      detail::throw_bad_await("weft::fork_group::fork: empty or moved-from task");
    if (m_state == nullptr) m_state = new detail::reap_state;
    task<void> child = detail::reaped_child(std::move(t), m_state, m_state->m_forked);
    auto h = detail::task_handle(child);
    h.promise().m_mode = detail::completion::detached;
    m_state->m_count.fetch_add(1, std::memory_order_relaxed);  // the group's own count keeps it above zero
    try {
      detail::enqueue_child(h.promise(), h, detail::k_inherit_priority, nullptr);
    } catch (...) {
      m_state->m_count.fetch_sub(1, std::memory_order_relaxed);
      throw;  // `child` frees it, unstarted
    }
    detail::release_task(child);  // frees itself when it finishes
    ++m_state->m_forked;
  }

  /// fork(std::invoke(fn, args...)): the task fn returns, forked as above (fn's own
  /// exceptions propagate, nothing queued).
  template <class F, class... A>
    requires std::invocable<F, A...> && std::same_as<std::invoke_result_t<F, A...>, task<void>>
  void fork(F&& fn, A&&... args) {
    fork(std::invoke(std::forward<F>(fn), std::forward<A>(args)...));
  }

  /// Number of children forked and not yet finished (a snapshot: they finish on other
  /// threads).
  std::size_t size() const noexcept {
    return m_state == nullptr ? 0 : m_state->m_count.load(std::memory_order_relaxed) - 1;
  }

  /// Waits for every child still running; see the class comment. The group can be
  /// reused afterwards.
  task<void> join() {
    if (m_state == nullptr) co_return;
    co_await join_awaiter{m_state};
    std::exception_ptr error;
    {
      std::lock_guard lock(m_state->m_mutex);  // every child is done: uncontended
      error = std::exchange(m_state->m_error, nullptr);
    }
    m_state->m_forked = 0;
    if (error) std::rethrow_exception(error);
  }

 private:
  struct join_awaiter {
    detail::reap_state* m_st;
    bool await_ready() const noexcept {
      return m_st->m_count.load(std::memory_order_acquire) == 1;  // pairs with reap_child_done
    }
    bool await_suspend(std::coroutine_handle<> h) noexcept { return detail::reap_join_suspend(m_st, h); }
    void await_resume() const noexcept {
      m_st->m_count.store(1, std::memory_order_relaxed);
    }  // the group's count again
  };

  detail::reap_state* m_state = nullptr;
};

}  // namespace weft
