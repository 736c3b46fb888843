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
// single-threaded). A token (with_cancel's, or for with_timeout the awaiting task's) is
// watched through detail::stop_relay (weft/io/use_task.hpp), as use_task itself does.
// The task resumes once the operation completed (and, for with_timeout, once its
// timer's handler ran too), on the executor it awaited from.
#pragma once

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
  /// Never ready: the operation starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Records the awaiting coroutine `h`, then starts the timer and the operation on the
  /// operation's I/O thread (inline when already there). When `h` is a weft task (or
  /// fiber) running under a stop token, a stop cancels the operation too.
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) {
    m_waiter.capture(h);
    if (const std::stop_token* t = weft::detail::awaiting_token(h); t != nullptr && t->stop_possible()) m_token = *t;
    asio::dispatch(detail::sink_access::io_executor(m_op), [this] { begin(); });  // inline when on the I/O thread
  }
  /// The completion values; the error_code is error::timed_out when the timer cancelled
  /// the operation (error::cancelled when the task's stop did).
  typename traits::result_type await_resume() {
    auto& ec = std::get<0>(*m_values);
    if (m_fired && ec == error::cancelled) ec = make_error_code(error::timed_out);  // see use_task.hpp
    return traits::take(std::move(*m_values));
  }

 private:
  friend struct detail::sink_access;
  using relay_type =
      detail::stop_relay<timeout_op, std::decay_t<decltype(detail::sink_access::io_executor(std::declval<Op&>()))>>;

  /// Made by with_timeout.
  timeout_op(Op op, Duration d) : m_op(std::move(op)), m_duration(d) {}

  /// Sink protocol (on the I/O thread): the slot the timer cancels through.
  asio::cancellation_slot cancellation_slot() noexcept { return m_signal.slot(); }
  /// Sink protocol (on the I/O thread): stores the values, stops the timer.
  template <class... Args>
  void complete(Args... args) {
    m_values.emplace(std::move(args)...);
    m_timer->cancel();
    if (m_relay && !m_relay->completed()) ++m_pending;  // the relay's posted stop must run first
    done_one();
  }
  /// Stop relay protocol (detail::stop_relay, on the I/O thread).
  bool has_completed() const noexcept { return m_values.has_value(); }
  /// Stop relay protocol: the relay's posted stop ran after the completion.
  void resume_after_stop() noexcept { done_one(); }
  /// Stop relay protocol: the task's token was stopped; cancel through the
  /// timer's signal unless the timer did already.
  void on_stop() {
    if (!m_fired) m_signal.emit(asio::cancellation_type::terminal);
  }

  void begin() {
    m_pending = 2;
    m_timer.emplace(detail::sink_access::io_executor(m_op), m_duration);
    m_timer->async_wait([this](const std::error_code& ec) {
      if (!ec && !m_values) {
        m_fired = true;
        m_signal.emit(asio::cancellation_type::terminal);
      }
      done_one();
    });
    detail::sink_access::start(m_op, *this);
    if (m_token.stop_possible()) {
      m_relay.emplace(std::move(m_token), detail::sink_access::io_executor(m_op));
      m_relay->listen(*this);  // runs the stop at once (posted) if already requested
    }
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
  bool m_fired = false;                // the timer cancelled the operation
  std::stop_token m_token;             // the awaiting task's, when it can be stopped
  detail::pinned<relay_type> m_relay;  // watches m_token while the operation runs
};

/// Runs `op` (an Asio operation with use_task whose first completion value is an
/// error_code) for at most `d`: when the time runs out the operation is cancelled and
/// its error_code is weft::io::error::timed_out (== std::errc::timed_out). The
/// operation's object must provide its executor (sockets, acceptors, timers, resolvers
/// and Asio's composed operations on them do). Awaitable from any thread; the timer and
/// the cancellation run on the operation's I/O thread, and the task resumes on the
/// executor it awaited from. Asio's rule still holds: no other operation may be
/// started on the same object concurrently. A stop of the awaiting task's token cancels
/// the operation as well (weft::io::error::cancelled). Not weft::with_timeout
/// (weft/timeout.hpp, a timeout_result{ec, value}): qualify the call where both
/// namespaces are imported (unqualified, it is ambiguous).
template <asio_operation Op, class Rep, class Period>
auto with_timeout(Op&& op, std::chrono::duration<Rep, Period> d) {
  using op_t = std::remove_cvref_t<Op>;
  static_assert(detail::op_traits<op_t>::k_has_error_code,
                "weft::io::with_timeout: the operation's first completion value must be a std::error_code");
  const auto steady = std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
  return detail::sink_access::make<timeout_op<op_t, std::chrono::steady_clock::duration>>(std::forward<Op>(op), steady);
}

/// The awaitable of with_cancel(op, token). Awaited once; not thread-safe (one owner).
template <class Op>
class [[nodiscard]] cancel_op {
  using traits = detail::op_traits<Op>;

 public:
  /// Never ready: the operation starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Records the awaiting coroutine `h`, then starts the operation and listens to the
  /// token on the operation's I/O thread (inline when already there).
  void await_suspend(std::coroutine_handle<> h) {
    m_waiter.capture(h);
    asio::dispatch(detail::sink_access::io_executor(m_op), [this] { begin(); });
  }
  /// The completion values (weft::io::error::cancelled when cancelled).
  typename traits::result_type await_resume() { return traits::take(std::move(*m_values)); }

 private:
  friend struct detail::sink_access;
  using relay_type =
      detail::stop_relay<cancel_op, std::decay_t<decltype(detail::sink_access::io_executor(std::declval<Op&>()))>>;

  /// Made by with_cancel.
  cancel_op(Op op, std::stop_token token) : m_op(std::move(op)), m_token(std::move(token)) {}

  /// Sink protocol (on the I/O thread): the slot a cancellation goes through.
  asio::cancellation_slot cancellation_slot() noexcept { return m_relay->slot(); }
  /// Sink protocol (on the I/O thread): stores the values, stops listening.
  template <class... Args>
  void complete(Args... args) {
    m_values.emplace(std::move(args)...);
    if (m_relay->completed()) m_waiter.resume();  // else the relay's posted stop resumes
  }
  /// Stop relay protocol (detail::stop_relay, on the I/O thread).
  bool has_completed() const noexcept { return m_values.has_value(); }
  /// Stop relay protocol: the relay's posted stop ran after the completion.
  void resume_after_stop() noexcept { m_waiter.resume(); }
  /// Stop relay protocol: cancels the operation through the relay's slot.
  void on_stop() { m_relay->emit_terminal(); }

  void begin() {
    const bool watch = m_token.stop_possible();
    m_relay.emplace(std::move(m_token), detail::sink_access::io_executor(m_op));  // before start: the slot is its
    detail::sink_access::start(m_op, *this);
    if (watch) m_relay->listen(*this);  // runs the stop at once (posted) if already requested
  }

  Op m_op;
  std::stop_token m_token;  // until begin() hands it to the relay
  detail::waiter m_waiter;
  std::optional<typename traits::values_type> m_values;
  detail::pinned<relay_type> m_relay;  // from begin(): the operation's slot, and the token's watch
};

/// Runs `op` (an Asio operation with use_task) until it completes or a stop is
/// requested on `token`, whichever comes first; a cancelled operation completes with
/// weft::io::error::cancelled (== std::errc::operation_canceled). The stop may be
/// requested from any thread, also before the operation starts. Awaitable from any
/// thread; the task resumes on the executor it awaited from.
template <asio_operation Op>
auto with_cancel(Op&& op, std::stop_token token) {
  return detail::sink_access::make<cancel_op<std::remove_cvref_t<Op>>>(std::forward<Op>(op), std::move(token));
}

/// with_cancel(op, source.get_token()).
template <asio_operation Op>
auto with_cancel(Op&& op, const cancel_source& source) {
  return detail::sink_access::make<cancel_op<std::remove_cvref_t<Op>>>(std::forward<Op>(op), source.get_token());
}

}  // namespace weft::io
