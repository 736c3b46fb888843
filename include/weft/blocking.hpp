// weft/blocking.hpp: weft::spawn_blocking, a blocking call run off the executor's
// threads.
//
//   std::string text = co_await weft::spawn_blocking(read_config, path);
//   auto rows = co_await weft::spawn_blocking(pool, [&] { return db.query(sql); });
//
// The function runs on a thread of a blocking_pool: a separate set of threads that
// grows on demand up to blocking_options::max_threads and shrinks when idle, so that a
// blocking call (getaddrinfo, a blocking library, a long CPU-bound parse) does not hold
// a worker that tasks and I/O completions need. The awaiting task is suspended meanwhile
// and resumes on the executor it awaited from (at its priority), with the function's
// value, or its exception rethrown. Without a pool argument the process-wide default
// pool runs it (default_blocking_pool()).
//
// Limits: when every thread is busy and max_queued calls wait already, spawn_blocking
// throws weft::blocking_rejected (from the co_await) and runs nothing. Stop: when the
// awaiting task's token (weft/stop.hpp) is stopped while the call still waits in the
// queue, the call is withdrawn, never runs, and the co_await throws weft::cancelled; a
// call already running is not interrupted (nothing can cut a blocking call short) and
// its result is delivered.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/executor.hpp"
#include "weft/stop.hpp"
#include "weft/task.hpp"

namespace weft {

/// What a blocking_pool may grow to.
struct blocking_options {
  /// Most threads running calls at once (at least 1).
  std::size_t max_threads = 64;
  /// Most calls waiting for a thread once all max_threads are busy; one more is refused
  /// with blocking_rejected.
  std::size_t max_queued = 65536;
  /// How long a thread with nothing to run waits for a call before it exits.
  std::chrono::milliseconds keep_alive{10'000};
};

/// Thrown by spawn_blocking when its pool's queue is full (blocking_options::max_queued
/// calls wait, every thread is busy): the call was not run.
class blocking_rejected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// One call queued to a blocking_pool: an intrusive node in the awaiting frame.
struct blocking_job {
  void (*m_run)(blocking_job&) noexcept = nullptr;  // runs the call, then resumes the task
  blocking_job* m_next = nullptr;
};

}  // namespace detail

/// A bounded, growable set of threads for blocking calls (see the file comment).
/// Thread-safe. Its destructor waits for the calls queued and running to end and for
/// its threads to exit; a call made during or after destruction is refused
/// (blocking_rejected).
class blocking_pool {
 public:
  /// Throws std::invalid_argument when max_threads is 0.
  explicit blocking_pool(blocking_options options = {});
  blocking_pool(const blocking_pool&) = delete;
  blocking_pool& operator=(const blocking_pool&) = delete;
  ~blocking_pool();

  /// The options it was made with.
  const blocking_options& options() const noexcept { return m_options; }
  /// Threads alive now (running a call or idle within keep_alive). A snapshot.
  std::size_t thread_count() const;
  /// Calls waiting for a thread now. A snapshot.
  std::size_t queued() const;

  /// Queues `job` (runs it on a thread of this pool). Throws blocking_rejected when the
  /// queue is full or the pool is being destroyed, std::system_error when no thread can
  /// be started and none runs. Not API: spawn_blocking's.
  void submit(detail::blocking_job& job);
  /// Takes `job` off the queue if no thread took it yet: true then (it will never run).
  /// Not API: spawn_blocking's stop.
  bool withdraw(detail::blocking_job& job) noexcept;

 private:
  struct state;  // src/blocking.cpp; shared with the threads, so that the last one out frees it
  const blocking_options m_options;
  std::shared_ptr<state> m_state;
};

/// The process-wide pool spawn_blocking(fn, args...) uses: blocking_options{} (64
/// threads, 65536 queued calls, 10 s keep-alive). Made on first use, never destroyed
/// (idle threads exit after keep_alive).
blocking_pool& default_blocking_pool();

namespace detail {

/// The awaitable spawn_blocking returns: holds the call and its result in the awaiting
/// frame; used once by its co_await.
template <class F, class... Args>
class blocking_awaitable : blocking_job {
  using result_type = std::invoke_result_t<F&, Args&...>;
  using stored = std::conditional_t<std::is_void_v<result_type>, std::monostate, result_type>;

 public:
  blocking_awaitable(blocking_pool& pool, F fn, std::tuple<Args...> args)
      : m_pool(&pool), m_fn(std::move(fn)), m_args(std::move(args)) {
    m_run = &blocking_awaitable::run;
  }
  blocking_awaitable(blocking_awaitable&& o) noexcept(std::is_nothrow_move_constructible_v<F> &&
                                                      (std::is_nothrow_move_constructible_v<Args> && ...))
      : blocking_job(), m_pool(o.m_pool), m_fn(std::move(o.m_fn)), m_args(std::move(o.m_args)) {
    m_run = &blocking_awaitable::run;
  }
  blocking_awaitable& operator=(blocking_awaitable&&) = delete;

  bool await_ready() const noexcept { return false; }

  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) {
    m_handle = h;
    m_executor = current_executor();
    m_prio = current_priority();
    if (const std::stop_token* t = awaiting_token(h); t != nullptr && t->stop_possible()) {
      if (t->stop_requested()) throw cancelled();  // stopped already: nothing is run
      // Registered before the submit (once queued, the call may run and resume the task
      // at once, on another thread): a stop in between finds nothing to withdraw, and
      // the call runs.
      m_watch.emplace(*t, withdraw_on_stop{this});
    }
    m_pool->submit(*this);  // throws: the co_await rethrows it, nothing queued
  }

  result_type await_resume() {
    m_watch.reset();  // waits for a stop callback running now (it may be the one that resumed us)
    if (m_withdrawn) throw cancelled();
    if (m_error) std::rethrow_exception(m_error);
    if constexpr (!std::is_void_v<result_type>) return std::move(*m_value);
  }

 private:
  struct withdraw_on_stop {
    blocking_awaitable* m_self;
    void operator()() const noexcept {
      // Either a thread has taken the call (it runs and resumes the task) or the call is
      // withdrawn here and never runs: the task is resumed once, by one of the two.
      if (m_self->m_pool->withdraw(*m_self)) {
        m_self->m_withdrawn = true;
        m_self->resume();
      }
    }
  };

  static void run(blocking_job& j) noexcept {
    auto& self = static_cast<blocking_awaitable&>(j);
    try {
      if constexpr (std::is_void_v<result_type>) {
        std::apply(self.m_fn, self.m_args);
      } else {
        self.m_value.emplace(std::apply(self.m_fn, self.m_args));
      }
    } catch (...) {
      self.m_error = std::current_exception();
    }
    self.resume();
  }

  // On the executor it awaited from; inline where there is none, or where it refuses
  // work (it shuts down): the task then goes on on this thread.
  void resume() noexcept {
    if (m_executor != nullptr) {
      try {
        m_executor->schedule(m_handle, m_prio);
        return;
      } catch (...) {
      }
    }
    m_handle.resume();
  }

  blocking_pool* m_pool;
  F m_fn;
  std::tuple<Args...> m_args;
  std::optional<stored> m_value;
  std::exception_ptr m_error;
  std::coroutine_handle<> m_handle;
  executor* m_executor = nullptr;
  unsigned m_prio = 0;
  bool m_withdrawn = false;
  std::optional<std::stop_callback<withdraw_on_stop>> m_watch;
};

}  // namespace detail

/// `co_await weft::spawn_blocking(pool, fn, args...)`: runs std::invoke(fn, args...) on
/// a thread of `pool` and evaluates to its result (see the file comment). `fn` and
/// `args` are decay-copied into the awaiting frame (pass std::ref for a reference).
/// Throws blocking_rejected (queue full), weft::cancelled (stopped before it ran), or
/// what `fn` threw. From a weft task (or a fiber).
template <class F, class... Args>
  requires std::is_invocable_v<std::decay_t<F>&, std::decay_t<Args>&...>
[[nodiscard]] auto spawn_blocking(blocking_pool& pool, F&& fn, Args&&... args) {
  return detail::blocking_awaitable<std::decay_t<F>, std::decay_t<Args>...>(
      pool, std::forward<F>(fn), std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...));
}

/// spawn_blocking(default_blocking_pool(), fn, args...).
/// `auto text = co_await weft::spawn_blocking(read_file_blocking, path);`
template <class F, class... Args>
  requires std::is_invocable_v<std::decay_t<F>&, std::decay_t<Args>&...>
[[nodiscard]] auto spawn_blocking(F&& fn, Args&&... args) {
  return spawn_blocking(default_blocking_pool(), std::forward<F>(fn), std::forward<Args>(args)...);
}

}  // namespace weft
