// weft/io/with_timeout.hpp: time limits and cancellation for Asio operations awaited
// with use_task.
//
//   auto [ec, n] = co_await weft::io::with_timeout(sock.async_read_some(buf, weft::io::use_task), 50ms);
//   if (ec == std::errc::timed_out) ...
//
//   std::stop_source stop;   // stop.request_stop() from any thread
//   auto [ec, n] = co_await weft::io::with_cancel(sock.async_read_some(buf, weft::io::use_task), stop.get_token());
//
// Both run the operation with an Asio cancellation slot of their own and emit terminal
// cancellation into it, always on the operation's I/O thread (Asio's cancellation is
// single-threaded). The task resumes once the operation completed (and, for
// with_timeout, once its timer's handler ran too), on the executor it awaited from.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "weft/io/cancel.hpp"
#include "weft/io/error.hpp"
#include "weft/io/use_task.hpp"

namespace weft::io {

namespace detail {

template <class Op>
struct op_traits;
template <class Initiation, class InitArgs, class... Args>
struct op_traits<async_op<Initiation, InitArgs, Args...>> {
  using values_type = std::tuple<Args...>;
  using result_type = typename op_result<Args...>::type;
  static constexpr bool k_has_error_code =
      sizeof...(Args) >= 1 && std::is_same_v<std::tuple_element_t<0, std::tuple<Args..., void>>, std::error_code>;
  static result_type take(values_type&& v) { return op_result<Args...>::take(std::move(v)); }
};

}  // namespace detail

/// The awaitable of with_timeout(op, d). Awaited once; not thread-safe (one owner).
template <class Op, class Duration>
class [[nodiscard]] timeout_op {
  using traits = detail::op_traits<Op>;

 public:
  /// Not API: made by with_timeout.
  timeout_op(Op op, Duration d) : m_op(std::move(op)), m_duration(d) {}

  /// Never ready: the operation starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Records the awaiting coroutine `h`, then starts the timer and the operation on the
  /// operation's I/O thread (inline when already there). When `h` is a weft task (or
  /// fiber) running under a stop token, a stop cancels the operation too.
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) {
    m_waiter.capture(h);
    if (const std::stop_token* t = weft::detail::awaiting_token(h); t != nullptr && t->stop_possible()) m_token = *t;
    asio::dispatch(m_op.io_executor(), [this] { begin(); });  // inline when on the I/O thread
  }
  /// The completion values; the error_code is error::timed_out when the timer cancelled
  /// the operation (error::cancelled when the task's stop did).
  typename traits::result_type await_resume() {
    auto& ec = std::get<0>(*m_values);
    if (m_fired && ec == error::cancelled) ec = make_error_code(error::timed_out);  // see use_task.hpp
    return traits::take(std::move(*m_values));
  }

  /// Not API: sink protocol (on the I/O thread): the slot the timer cancels through.
  asio::cancellation_slot cancellation_slot() noexcept { return m_signal.slot(); }
  /// Not API: sink protocol (on the I/O thread): stores the values, stops the timer.
  template <class... Args>
  void complete(Args... args) {
    m_values.emplace(std::move(args)...);
    m_timer->cancel();
    // Unregistering waits for a stop callback running on another thread; if it posted
    // stop_emit(), that must run before this object may go: one more to wait for.
    m_callback.reset();
    if (m_stop_fired.load(std::memory_order_acquire) && !m_stop_emit_ran) ++m_pending;
    done_one();
  }

 private:
  // On the requesting thread: hand the stop to the I/O thread.
  struct fire {
    timeout_op* m_self;
    void operator()() const noexcept {
      m_self->m_stop_fired.store(true, std::memory_order_release);  // pairs with complete()
      asio::post(m_self->m_op.io_executor(), [self = m_self] { self->stop_emit(); });
    }
  };
  void begin() {
    m_pending = 2;
    m_timer.emplace(m_op.io_executor(), m_duration);
    m_timer->async_wait([this](const std::error_code& ec) {
      if (!ec && !m_values) {
        m_fired = true;
        m_signal.emit(asio::cancellation_type::terminal);
      }
      done_one();
    });
    m_op.start(*this);
    if (m_token.stop_possible()) m_callback.emplace(m_token, fire{this});  // runs fire at once if stopped
  }
  void stop_emit() {  // on the I/O thread
    m_stop_emit_ran = true;
    if (m_values) done_one();  // completed meanwhile and waited for this
    else if (!m_fired) m_signal.emit(asio::cancellation_type::terminal);
  }
  void done_one() {
    if (--m_pending == 0) m_waiter.resume();
  }

  Op m_op;
  Duration m_duration;
  detail::waiter m_waiter;
  std::optional<typename traits::values_type> m_values;
  std::optional<asio::steady_timer> m_timer;
  asio::cancellation_signal m_signal;
  int m_pending = 0;
  bool m_fired = false;  // the timer cancelled the operation
  std::stop_token m_token;  // the awaiting task's, when it can be stopped
  detail::pinned<std::stop_callback<fire>> m_callback;
  std::atomic<bool> m_stop_fired{false};
  bool m_stop_emit_ran = false;
};

/// Runs `op` (an Asio operation with use_task whose first completion value is an
/// error_code) for at most `d`: when the time runs out the operation is cancelled and
/// its error_code is weft::io::error::timed_out (== std::errc::timed_out). The
/// operation's object must provide its executor (sockets, acceptors, timers, resolvers
/// and Asio's composed operations on them do). Awaitable from any thread; the timer and
/// the cancellation run on the operation's I/O thread, and the task resumes on the
/// executor it awaited from. Asio's rule still holds: no other operation may be
/// started on the same object concurrently. A stop of the awaiting task's token cancels
/// the operation as well (weft::io::error::cancelled).
template <asio_operation Op, class Rep, class Period>
auto with_timeout(Op&& op, std::chrono::duration<Rep, Period> d) {
  using op_t = std::remove_cvref_t<Op>;
  static_assert(detail::op_traits<op_t>::k_has_error_code,
                "weft::io::with_timeout: the operation's first completion value must be a std::error_code");
  const auto steady = std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
  return timeout_op<op_t, std::chrono::steady_clock::duration>(std::forward<Op>(op), steady);
}

/// The awaitable of with_cancel(op, token). Awaited once; not thread-safe (one owner).
template <class Op>
class [[nodiscard]] cancel_op {
  using traits = detail::op_traits<Op>;

 public:
  /// Not API: made by with_cancel.
  cancel_op(Op op, std::stop_token token) : m_op(std::move(op)), m_token(std::move(token)) {}

  /// Never ready: the operation starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Records the awaiting coroutine `h`, then starts the operation and listens to the
  /// token on the operation's I/O thread (inline when already there).
  void await_suspend(std::coroutine_handle<> h) {
    m_waiter.capture(h);
    asio::dispatch(m_op.io_executor(), [this] { begin(); });
  }
  /// The completion values (weft::io::error::cancelled when cancelled).
  typename traits::result_type await_resume() { return traits::take(std::move(*m_values)); }

  /// Not API: sink protocol (on the I/O thread): the slot a cancellation goes through.
  asio::cancellation_slot cancellation_slot() noexcept { return m_signal.slot(); }
  /// Not API: sink protocol (on the I/O thread): stores the values, stops listening.
  template <class... Args>
  void complete(Args... args) {
    m_values.emplace(std::move(args)...);
    // Unregistering waits for a callback running on another thread; afterwards m_fired
    // tells whether it posted emit(), which must run before this object may go.
    m_callback.reset();
    const bool posted = m_fired.load(std::memory_order_acquire);  // pairs with the release in fire
    if (!posted || m_emit_ran) m_waiter.resume();
  }

 private:
  // On the requesting thread (or inline in begin() when already stopped): hand the
  // request to the I/O thread.
  struct fire {
    cancel_op* m_self;
    void operator()() const noexcept {
      m_self->m_fired.store(true, std::memory_order_release);
      asio::post(m_self->m_op.io_executor(), [self = m_self] { self->emit(); });
    }
  };
  void begin() {
    m_op.start(*this);
    if (m_token.stop_possible()) m_callback.emplace(m_token, fire{this});  // runs fire at once if stopped
  }
  void emit() {  // on the I/O thread
    m_emit_ran = true;
    if (m_values) {
      m_waiter.resume();  // completed meanwhile and waited for this
    } else {
      m_signal.emit(asio::cancellation_type::terminal);
    }
  }

  Op m_op;
  std::stop_token m_token;
  std::optional<std::stop_callback<fire>> m_callback;
  std::atomic<bool> m_fired{false};
  detail::waiter m_waiter;
  std::optional<typename traits::values_type> m_values;
  asio::cancellation_signal m_signal;
  bool m_emit_ran = false;
};

/// Runs `op` (an Asio operation with use_task) until it completes or a stop is
/// requested on `token`, whichever comes first; a cancelled operation completes with
/// weft::io::error::cancelled (== std::errc::operation_canceled). The stop may be
/// requested from any thread, also before the operation starts. Awaitable from any
/// thread; the task resumes on the executor it awaited from.
template <asio_operation Op>
auto with_cancel(Op&& op, std::stop_token token) {
  return cancel_op<std::remove_cvref_t<Op>>(std::forward<Op>(op), std::move(token));
}

/// with_cancel(op, source.get_token()).
template <asio_operation Op>
auto with_cancel(Op&& op, const cancel_source& source) {
  return cancel_op<std::remove_cvref_t<Op>>(std::forward<Op>(op), source.get_token());
}

}  // namespace weft::io
