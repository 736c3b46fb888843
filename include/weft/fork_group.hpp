// weft/fork_group.hpp: a dynamic number of forks joined together.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/bulk.hpp"
#include "weft/detail/fork.hpp"
#include "weft/task.hpp"

namespace weft {

/// Forks tasks one at a time (each is stealable as soon as fork() returns) and joins
/// them all at once: `co_await g.join()` evaluates to std::vector<T> in fork order
/// (nothing for T = void) and rethrows the first (lowest-index) exception after every
/// child finished. Not thread-safe: use it from the task that owns it. A group destroyed
/// with children not joined detaches them (they run on; exceptions go to stderr).
template <class T = void>
class fork_group {
 public:
  /// An empty group.
  fork_group() = default;
  fork_group(const fork_group&) = delete;
  fork_group& operator=(const fork_group&) = delete;
  /// Detaches every child not joined (see the class comment).
  ~fork_group() {
    for (auto& t : m_tasks) detail::abandon_child(t.release());
  }

  /// Queues `t` to run in parallel with the caller. Throws std::logic_error for an
  /// empty task, std::bad_alloc; called off a pool worker, also what queueing on the
  /// executor throws (weft::shutdown_error). If it throws, `t` was not queued.
  void fork(task<T> t) {
    if (!t.valid()) [[unlikely]] detail::throw_bad_await("weft::fork_group::fork: empty or moved-from task");
    // Grow first (geometrically), so that nothing can throw once the child is queued.
    if (m_tasks.size() == m_tasks.capacity()) m_tasks.reserve(m_tasks.empty() ? 16 : 2 * m_tasks.size());
    auto h = t.handle();
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
    for (std::size_t i = ts.size(); i-- > 0;) co_await detail::join_awaiter{ts[i].handle()};
    co_return detail::collect<T>(ts);
  }

 private:
  std::vector<task<T>> m_tasks;
};

}  // namespace weft
