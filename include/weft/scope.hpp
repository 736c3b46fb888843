// weft/scope.hpp: weft::scope, the owner of a dynamic set of child tasks (a server's
// connections, a crawler's fetches) with one stop token for all of them, and
// weft::with_scope, the form that always joins them on the way out.
//
//   co_await weft::with_scope([&](weft::scope<>& conns) -> weft::task<void> {
//     for (;;) {  // conns is stopped when we are (with_scope links it to our token)
//       auto [ec, sock] = co_await listener.accept();  // io_uring: watches our token too
//       if (ec == std::errc::operation_canceled) break;
//       if (!ec) conns.spawn(serve, std::move(sock));  // runs on, freed when done
//     }
//   });  // every connection has ended here, also when the loop above threw
//
// Protocol. The scope's state is shared with its children and guarded by one mutex: the
// count of children alive, what finished since the last next() (a count, the values of
// a scope<T>), the kept exception, and the one task waiting in join() or next(). A
// child runs inside a small wrapper coroutine that frees the child's frame (and with it
// everything the child owns: sockets, buffers) as soon as it finishes, then reports
// under the mutex and wakes the waiter when it is due (on the waiter's executor, at its
// priority). The state is reference-counted (the scope's reference plus one per child)
// so that a child's last touch of it, after the report, never meets a freed state. A
// child refers to nothing of the scope object itself, only to the state: so a scope
// destroyed with children alive can leave them running (stopped) without a dangling
// pointer; the state then notes that its owner is gone, drops what they would report
// (values) and hands their exceptions to report_detached_exception.
#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/detail/fork.hpp"
#include "weft/detail/frame_allocator.hpp"
#include "weft/spawn.hpp"
#include "weft/stop.hpp"
#include "weft/task.hpp"

namespace weft {

/// What a scope does with its children's exceptions. Whatever the policy, join() and
/// next() rethrow only once no child is alive.
enum class scope_policy : std::uint8_t {
  /// The first exception is rethrown once; later ones are dropped. join() rethrows it
  /// after every child has ended on its own; next() stops the other children
  /// (request_stop), waits until none is alive, then rethrows it.
  rethrow_first,
  /// As rethrow_first, and the first exception also stops every child at once.
  stop_on_error,
  /// Nothing is rethrown: every exception is kept for take_errors().
  collect,
};

/// Options of a weft::scope. A plain value.
struct scope_options {
  scope_policy policy = scope_policy::rethrow_first;  ///< see scope_policy
  /// true: each child that ends normally is kept for next() to report (a scope<T>
  /// keeps its value) until next() takes it or join() drops it. false: nothing is
  /// kept (a scope<T> destroys each value as its child ends), so a scope that lives
  /// long without next() holds memory for its children alive only; next() then
  /// reports only the end (false, or std::nullopt, once no child is alive).
  bool keep_values = true;
};

namespace detail {

/// The state of a scope, shared with its children (src/scope.cpp; protocol at the top
/// of this file). Everything but m_refs, m_source and m_token is guarded by m_mutex.
class scope_state {
 public:
  explicit scope_state(scope_options o)
      : m_token(m_source.get_token()), m_policy(o.policy), m_keep_values(o.keep_values) {}
  virtual ~scope_state() = default;
  scope_state(const scope_state&) = delete;
  scope_state& operator=(const scope_state&) = delete;

  /// A child is about to be queued (counted alive, one more reference).
  void child_added() noexcept;
  /// Queueing that child failed: undoes child_added.
  void child_not_started() noexcept;
  /// A child finished (its frame already freed) with `error` (or none), or `stopped`
  /// (it ended with weft::cancelled after a stop: no value, no error, nothing to
  /// report); `store` runs under the lock for a value to keep (scope<T>: not when
  /// keep_values is false or the owner is gone). Wakes the waiter when due, then drops
  /// the child's reference (which may free the state).
  template <class Store>
  void child_done(std::exception_ptr error, bool stopped, Store&& store) noexcept {
    std::coroutine_handle<> wake;
    {
      std::lock_guard lock(m_mutex);
      const bool keep = !error && !stopped && m_keep_values && !m_owner_gone;
      if (keep) store();
      on_done_locked(keep, error, stopped, wake);
    }
    finish_report(wake, std::move(error));
  }
  /// keep_values of the options (constant). Thread-safe.
  bool keeps_values() const noexcept { return m_keep_values; }

  /// join(): true when nothing is alive (no need to suspend).
  bool join_ready() noexcept;
  /// join()'s suspension: records `h` (resumed on the current executor when the last
  /// child finishes); false when nothing is alive any more (do not suspend).
  bool join_suspend(std::coroutine_handle<> h) noexcept;
  /// next(): true when there is something to report or nothing alive.
  bool next_ready() noexcept;
  /// next()'s suspension, as join_suspend but woken by the next child to finish.
  bool next_suspend(std::coroutine_handle<> h) noexcept;
  /// True when an exception is kept for join() or next() to rethrow.
  bool has_kept() noexcept;
  /// Rethrows (and forgets) the kept exception, if any (not for `collect`).
  void rethrow_kept();
  /// What next() found: a report taken, none yet (children alive), or none left.
  enum class report : std::uint8_t { taken, pending, none_left };
  /// next() of scope<void>: takes one finished child's report.
  report take_report() noexcept;

  /// Every exception collected so far (policy collect), taken. Thread-safe.
  std::vector<std::exception_ptr> take_errors();
  /// Children alive (a snapshot). Thread-safe.
  std::size_t alive() noexcept;
  /// Called by the scope's destructor: notes that the owner is gone (what children
  /// report from now on is dropped, their exceptions go to report_detached_exception);
  /// when children are still alive, says so on stderr and stops them; reports a kept
  /// exception nobody rethrew and the collected ones nobody took; drops the untaken
  /// values and the scope's reference.
  void release_owner() noexcept;

  std::stop_source m_source;
  const std::stop_token m_token;  // stops every child's own token (scope_child)

 protected:
  std::size_t alive_locked() const noexcept { return m_alive; }

  /// scope<T>: destroys the values not taken (called once the owner is gone).
  virtual void drop_values() noexcept {}

  std::mutex m_mutex;
  std::size_t m_unreported = 0;  // finished, not yet reported by next()

 private:
  // `error` is left alone unless the owner is gone (then finish_report reports it).
  void on_done_locked(bool kept, std::exception_ptr& error, bool stopped, std::coroutine_handle<>& wake) noexcept;
  void finish_report(std::coroutine_handle<> wake, std::exception_ptr orphan) noexcept;
  bool suspend(std::coroutine_handle<> h, bool for_next) noexcept;
  void drop_ref() noexcept;

  std::atomic<std::size_t> m_refs{1};       // the scope's own, plus one per child alive
  std::atomic<bool> m_stop_pending{false};  // stop_on_error: request_stop after the lock
  std::size_t m_alive = 0;
  std::coroutine_handle<> m_waiter;  // in join() or next()
  executor* m_home = nullptr;        // where it resumes
  unsigned m_prio = 0;               // at its priority
  bool m_waiting_next = false;
  bool m_owner_gone = false;  // the scope was destroyed; children alive run on detached
  const scope_policy m_policy;
  const bool m_keep_values;
  std::exception_ptr m_kept;                 // rethrow_first, stop_on_error
  std::vector<std::exception_ptr> m_errors;  // collect
};

/// scope<T>'s state: the values of finished children, until next() takes them.
template <class T>
class scope_values final : public scope_state {
 public:
  using scope_state::scope_state;
  std::deque<T> m_values;  // guarded by m_mutex
  /// next() of scope<T>: takes the oldest value not yet taken into `out`.
  report take_value(std::optional<T>& out) {
    std::lock_guard lock(m_mutex);
    if (m_values.empty()) return alive_locked() == 0 ? report::none_left : report::pending;
    out.emplace(std::move(m_values.front()));
    m_values.pop_front();
    --m_unreported;
    return report::taken;
  }

 private:
  void drop_values() noexcept override {
    std::deque<T> gone;
    {
      std::lock_guard lock(m_mutex);
      gone.swap(m_values);
    }
    // `gone` is destroyed here, outside the lock.
  }
};

/// The wrapper a child runs in: runs `t` under a token of its own, frees its frame,
/// then reports to `st`.
template <class T, class State>
task<void> scope_child(task<T> t, State* st) {
  std::exception_ptr error;
  bool stopped = false;
  std::optional<std::conditional_t<std::is_void_v<T>, char, T>> value;
  try {
    // The child's own token, stopped by the scope's through one callback. Each wait of
    // the child registers its stop callback here, on a stop state only this child
    // uses, rather than on the scope's, which every child on every worker would share
    // (a contended lock and reference count for every operation of every connection).
    std::stop_source own;
    const std::stop_callback<stop_forward> link(st->m_token, stop_forward{&own});
    const std::stop_token token = own.get_token();
    using promise = typename task<T>::promise_type;
    if constexpr (std::is_void_v<T>) {
      co_await run_under_token<promise>{task_handle(t), &token};
    } else {
      value.emplace(co_await run_under_token<promise>{task_handle(t), &token});
    }
  } catch (const cancelled&) {
    // A wait ended by the scope's stop: the child stopped, it did not fail.
    if (st->m_token.stop_requested())
      stopped = true;
    else
      error = std::current_exception();
  } catch (...) {
    error = std::current_exception();
  }
  // The child's locals (a connection's socket, say) go before the scope hears, and so
  // does a value nobody will take.
  t = task<T>{};
  if (!st->keeps_values()) value.reset();
  st->child_done(std::move(error), stopped, [&]() noexcept {
    if constexpr (!std::is_void_v<T>) {
      try {
        st->m_values.push_back(std::move(*value));
      } catch (...) {
        std::fputs("weft::scope: out of memory keeping a child's value; terminating\n", stderr);
        std::terminate();
      }
      // The moved-from value too goes before the report: once next() or join() sees
      // no child alive, nothing a child made outlives it.
      value.reset();
    }
  });
}

struct scope_access;

/// Awaiter of join()/next() (which one: `ForNext`).
template <bool ForNext>
struct scope_wait {
  scope_state* m_st;
  bool await_ready() const noexcept { return ForNext ? m_st->next_ready() : m_st->join_ready(); }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    return ForNext ? m_st->next_suspend(h) : m_st->join_suspend(h);
  }
  void await_resume() const noexcept {}
};

}  // namespace detail

/// Owns a dynamic set of child tasks (tokio's JoinSet, a Trio nursery): spawn() starts
/// a child at once, on any executor; each finished child's frame is freed at once, so
/// the frames held are those of the children alive, not of the children ever spawned;
/// every child runs under a stop token of its own (weft/stop.hpp) that the scope's token
/// stops, and request_stop() (or the parent token given to the constructor) stops the
/// scope's; `co_await join()` waits for all and rethrows the first exception (see
/// scope_policy); `co_await next()` reports children one by one as they finish. For
/// `scope<T>` with T not void, children are task<T> and next() hands over their values:
/// a value is kept until next() takes it or join() drops it, so a long-lived scope<T>
/// whose owner never calls next() grows by one value per child, unless it is made with
/// `{.keep_values = false}` (scope_options). A child that ends by throwing
/// weft::cancelled once the scope's token is stopped (a lock or event wait cut short,
/// weft/stop.hpp) counts as stopped: not an error, and nothing for next() to report.
/// join() and next() never rethrow while a child is alive, so the exception they throw
/// may unwind through the scope.
///
/// Write the owner with weft::with_scope, which joins on every way out: an exception of
/// the owner between spawn and join then waits for the stopped children before it goes
/// on. A scope destroyed with children still alive (an owner that threw, or never
/// joined) does not wait, since a destructor cannot suspend: it prints a message,
/// requests a stop, and leaves the children to end detached; they hold the scope's
/// state, not the scope, so nothing of weft's is freed under them, but whatever of the
/// owner's they refer to (its locals, by reference) is gone. spawn, join and next are
/// for the owning task (one at a time); request_stop, stop_requested, get_token and size
/// are thread-safe. Not movable.
template <class T = void>
class scope {
  using state_type = std::conditional_t<std::is_void_v<T>, detail::scope_state, detail::scope_values<T>>;

 public:
  /// A scope with no parent token. Throws std::bad_alloc.
  explicit scope(scope_options options = {}) : m_state(new state_type(options)) {}
  /// A scope whose children are also stopped when `parent` is (typically the owner's own
  /// token: `weft::scope s{co_await weft::this_task::stop_token()};`). Throws std::bad_alloc.
  explicit scope(std::stop_token parent, scope_options options = {}) : scope(options) {
    if (parent.stop_possible()) m_parent_link.emplace(std::move(parent), detail::stop_forward{&m_state->m_source});
  }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  /// See the class comment: with children alive, stops them and leaves them detached
  /// (with a message on stderr).
  ~scope() {
    m_parent_link.reset();
    m_state->release_owner();
  }

  /// Starts `t` as a child on the executor the caller runs on (a plain thread:
  /// weft::default_pool()), at the caller's priority. Throws std::logic_error for an
  /// empty task, std::bad_alloc, shutdown_error from an executor shutting down; if it
  /// throws, `t` did not start.
  /// Memory: `t`'s frame was made before this call, on the calling thread's frame stack
  /// (weft/detail/frame_allocator.hpp), where children that finish out of order leave
  /// holes that are reused only once the frames above them are gone: under steady churn
  /// that stack grows to its 16 MiB span before frames are recycled. spawn(fn, args...)
  /// makes the frame off that stack, so memory follows the children alive.
  void spawn(task<T> t) { start(std::move(t), detail::k_inherit_priority, nullptr); }
  /// Starts the task `std::invoke(fn, args...)` returns, as spawn(task), with its frame
  /// made off the calling thread's frame stack (see spawn(task)): the form for a
  /// server's accept loop. `s.spawn(serve, std::move(sock));` Throws as spawn(task),
  /// and whatever fn throws (then nothing started).
  template <class F, class... A>
    requires std::invocable<F, A...> && std::same_as<std::invoke_result_t<F, A...>, task<T>>
  void spawn(F&& fn, A&&... args) {
    task<T> t = [&] {
      detail::off_stack_frames guard;
      return std::invoke(std::forward<F>(fn), std::forward<A>(args)...);
    }();
    start(std::move(t), detail::k_inherit_priority, nullptr);
  }
  /// Starts the child that `op` describes (`s.spawn(weft::spawn(t).run_on(io).priority(1))`),
  /// on its executor and at its priority. Throws as spawn(task), and std::out_of_range
  /// for a priority the executor does not have.
  void spawn(spawn_op<T>&& op) { start(std::move(op.m_task), op.m_prio, op.m_target); }

  /// `co_await s.join()`: waits until no child is alive (it stops none), drops the
  /// values next() did not take, then rethrows the first exception not yet rethrown
  /// (rethrow_first, stop_on_error). The scope can be used again afterwards.
  task<void> join() {
    co_await detail::scope_wait<false>{m_state};
    if constexpr (!std::is_void_v<T>) m_state->m_values.clear();  // uncontended: nothing alive
    m_state->rethrow_kept();
  }

  /// `co_await s.next()`: waits for a child to finish that next() has not reported
  /// yet. For scope<void> evaluates to true, or false when no child is alive and every
  /// finished one was reported; for scope<T>, to the child's value, or std::nullopt
  /// likewise (with keep_values false, only the end is reported). Children that threw
  /// report nothing here; under rethrow_first and stop_on_error, a next() that finds
  /// an exception kept stops every child (request_stop), waits until none is alive,
  /// then rethrows it (once): the owner's catch meets no child running. Values that
  /// finished meanwhile are still there for the next next().
  auto next() -> task<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> {
    using report = detail::scope_state::report;
    for (;;) {
      co_await detail::scope_wait<true>{m_state};
      if (m_state->has_kept()) {
        request_stop();
        co_await detail::scope_wait<false>{m_state};
        m_state->rethrow_kept();
      }
      if constexpr (std::is_void_v<T>) {
        const report r = m_state->take_report();
        if (r != report::pending) co_return r == report::taken;
      } else {
        std::optional<T> v;
        const report r = m_state->take_value(v);
        if (r != report::pending) co_return v;
      }
    }
  }

  /// Asks every child (those alive and those spawned later) to stop, through the
  /// scope's token. Idempotent. Thread-safe.
  void request_stop() noexcept { m_state->m_source.request_stop(); }
  /// True once a stop was requested (by request_stop, the parent token, or
  /// stop_on_error). Thread-safe.
  bool stop_requested() const noexcept { return m_state->m_token.stop_requested(); }
  /// The scope's token: once it is stopped, so is every child's (each child runs under
  /// a token of its own, linked to this one). Thread-safe.
  std::stop_token get_token() const noexcept { return m_state->m_token; }
  /// Children alive (a snapshot: they finish on other threads). Thread-safe.
  std::size_t size() const noexcept { return m_state->alive(); }
  /// Policy collect: every exception the children ended with so far, taken out (in the
  /// order they finished). Empty under the other policies. Thread-safe.
  std::vector<std::exception_ptr> take_errors() { return m_state->take_errors(); }

 private:
  void start(task<T> t, unsigned prio, executor* target) {
    if (!t.valid()) [[unlikely]]
      detail::throw_bad_await("weft::scope::spawn: empty or moved-from task");
    task<void> child = [&] {
      detail::off_stack_frames guard;  // finishes out of order, often on another thread
      return detail::scope_child<T>(std::move(t), m_state);
    }();
    auto h = detail::task_handle(child);
    h.promise().m_mode = detail::completion::detached;
    h.promise().m_stop = &m_state->m_token;  // the wrapper's; the child gets its own
    m_state->child_added();
    try {
      detail::enqueue_child(h.promise(), h, prio, target);
    } catch (...) {
      m_state->child_not_started();
      throw;  // `child` frees it (and `t` in it), unstarted
    }
    detail::release_task(child);  // frees itself when it finishes
  }

  friend struct detail::scope_access;

  state_type* m_state;
  std::optional<std::stop_callback<detail::stop_forward>> m_parent_link;
};

namespace detail {

/// with_scope's way in: waits until no child of `s` is alive (no allocation, nothing
/// thrown).
struct scope_access {
  template <class T>
  static scope_wait<false> all_ended(scope<T>& s) noexcept {
    return {s.m_state};
  }
};

/// What with_scope's body returns, and with_scope with it.
template <class F, class T>
using scope_body_t = std::invoke_result_t<F&, scope<T>&>;

}  // namespace detail

/// `co_await weft::with_scope([&](weft::scope<>& s) -> weft::task<R> {...})`: runs the
/// body with a fresh scope<T> (options `options`) whose token is linked to the
/// awaiting task's (a stop of the caller stops the children), and evaluates to what the
/// body returns, once no child is alive, on every way out. When the body returns, waits
/// for the children to end on their own (as join(): drops untaken values, rethrows the
/// first child's exception under rethrow_first and stop_on_error). When the body
/// throws, stops every child, waits until none is alive, then rethrows the body's
/// exception (a child's exception it hides is reported as unhandled:
/// pool_options::on_unhandled_exception, else stderr). The form for a server's
/// connection set: a connection's exception ends only that connection (the others run
/// on; under rethrow_first it is rethrown once all have ended, and a server that logs
/// each one catches in the connection task), and the accept loop's own exception
/// waits for every connection. `fn` is moved into the coroutine's frame, so a lambda's
/// captures live as long as the body runs. Thread-safety as scope's. Throws
/// std::bad_alloc before the body starts.
template <class T = void, class F>
  requires std::invocable<F&, scope<T>&> && detail::is_task<detail::scope_body_t<F, T>>::value &&
           (!std::is_reference_v<typename detail::scope_body_t<F, T>::value_type>)
auto with_scope(F fn, scope_options options = {}) -> detail::scope_body_t<F, T> {
  using R = typename detail::scope_body_t<F, T>::value_type;
  scope<T> s{co_await this_task::stop_token(), options};
  std::exception_ptr body_error;
  std::optional<std::conditional_t<std::is_void_v<R>, char, R>> result;
  try {
    if constexpr (std::is_void_v<R>) {
      co_await std::invoke(fn, s);
    } else {
      result.emplace(co_await std::invoke(fn, s));
    }
  } catch (...) {
    body_error = std::current_exception();
  }
  if (body_error) s.request_stop();
  co_await detail::scope_access::all_ended(s);
  // The scope's destructor reports a child's exception the body's hides.
  if (body_error) std::rethrow_exception(body_error);
  co_await s.join();  // nothing alive: drops untaken values, rethrows a child's exception
  if constexpr (!std::is_void_v<R>) co_return std::move(*result);
}

}  // namespace weft
