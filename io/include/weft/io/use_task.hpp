// weft/io/use_task.hpp: the completion token that makes any Asio operation awaitable
// from a weft task.
//
//   auto [ec, n] = co_await sock.async_read_some(asio::buffer(buf), weft::io::use_task);
//   auto ec = co_await timer.async_wait(weft::io::use_task);
//
// The operation is lazy: nothing starts until it is awaited. Its completion values
// become the result of the co_await: none -> void, one -> that value, several ->
// std::tuple of them (so structured bindings work). The task resumes on the executor
// it awaited from, at its priority: inline, with no post, when the completion runs on
// that executor's own thread (a task on an asio_executor awaiting that executor's
// sockets), else queued there. A coroutine awaiting from a plain thread (no executor)
// resumes on the thread that completes the operation (the I/O thread).
//
// A weft task (or fiber) running under a stop token (weft/stop.hpp) has its operation
// cancelled when that token is stopped: Asio's terminal cancellation, emitted on the
// operation's I/O thread; the task sees weft::io::error::cancelled. Only operations
// whose object names its executor are watched (io/README.md).
//
// Operations may be started from any thread (Asio allows it for distinct objects); two
// operations on one Asio object must not be started concurrently (Asio's rule).
//
// Error codes: every std::error_code completion value reaches the task in the same
// categories as the io_uring backend's (weft/io/error.hpp), so that one handler works
// over either backend: a cancellation (asio::error::operation_aborted) becomes
// weft::io::error::cancelled, asio::error::eof becomes weft::io::error::eof, and the
// other errno values of Asio's system category move to std::system_category (same
// value); a resolver's failures (Asio's netdb and addrinfo categories) become the
// weft::io::resolve_error codes weft::io::resolve yields for the same lookup
// (asio::error::host_not_found -> resolve_error::host_not_found, host_not_found_try_again
// -> try_again, no_recovery -> failure, service_not_found -> service_not_found). Test
// results with `ec == std::errc::...`, `ec == weft::io::error::...` and
// `ec == weft::io::resolve_error::...`; `ec == asio::error::eof`,
// `ec == asio::error::operation_aborted` and `ec == asio::error::host_not_found` do not
// hold for codes that went through use_task. Asio's misc category (but eof) and
// other categories are passed on as they are.
#pragma once

#include <atomic>
#include <coroutine>
#include <new>
#include <optional>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include "weft/io/detail/waiter.hpp"
#include "weft/io/error.hpp"
#include "weft/io/resolve_error.hpp"

namespace weft::io {

/// The completion token: pass it where Asio takes a handler. Stateless; thread-safe.
struct use_task_t {
  /// The token (it holds nothing).
  constexpr use_task_t() noexcept = default;
};

/// `weft::io::use_task`: see use_task_t.
inline constexpr use_task_t use_task{};

namespace detail {

/// What co_await yields for the completion signature void(Args...).
template <class... Args>
struct op_result {
  using type = std::tuple<Args...>;
  static type take(std::tuple<Args...>&& v) { return std::move(v); }
};
template <>
struct op_result<> {
  using type = void;
  static void take(std::tuple<>&&) noexcept {}
};
template <class A>
struct op_result<A> {
  using type = A;
  static A take(std::tuple<A>&& v) { return std::move(std::get<0>(v)); }
};

/// An Asio resolver failure (netdb category: getaddrinfo's EAI_NONAME, EAI_AGAIN,
/// EAI_FAIL as Asio translated them) as weft::io::resolve reports the same failure.
inline std::error_code weft_netdb_code(const std::error_code& ec) noexcept {
  switch (ec.value()) {
    case asio::error::host_not_found:
    case asio::error::no_data:  // a name without addresses: resolve says host_not_found too
      return make_error_code(resolve_error::host_not_found);
    case asio::error::host_not_found_try_again:
      return make_error_code(resolve_error::try_again);
    case asio::error::no_recovery:
      return make_error_code(resolve_error::failure);
    default:
      return ec;
  }
}

/// An Asio error code in the categories of weft's I/O layer (see the file comment).
inline std::error_code weft_error_code(const std::error_code& ec) noexcept {
  if (ec.category() == asio::error::get_system_category()) {
    if (ec.value() == asio::error::operation_aborted) return make_error_code(error::cancelled);
    return {ec.value(), std::system_category()};
  }
  if (ec == asio::error::eof) return make_error_code(error::eof);
  if (ec.category() == asio::error::get_netdb_category()) return weft_netdb_code(ec);
  // Asio's addrinfo codes are getaddrinfo's own EAI_* values (EAI_SERVICE, EAI_SOCKTYPE).
  if (ec.category() == asio::error::get_addrinfo_category()) return {ec.value(), resolve_category()};
  return ec;
}

/// A completion value as the task sees it: error codes through weft_error_code, the
/// rest unchanged.
template <class A>
decltype(auto) weft_value(A&& a) noexcept {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, std::error_code>) {
    return weft_error_code(a);
  } else {
    return std::forward<A>(a);
  }
}

/// The runtime's access to the protocol members of the operation awaitables (async_op,
/// timeout_op, cancel_op; private there). Sink protocol: the handler's slot and
/// completion (sink_handler). Stop relay protocol: has_completed, resume_after_stop and
/// on_stop (stop_relay). Operation protocol: make, start and io_executor.
struct sink_access {
  /// The awaitable Op made from `a...`.
  template <class Op, class... A>
  static Op make(A&&... a) {
    return Op(std::forward<A>(a)...);
  }
  /// Starts operation `op` with a handler that completes into `sink` (see async_op::start).
  template <class Op, class Sink>
  static void start(Op& op, Sink& sink) {
    op.start(sink);
  }
  /// The I/O executor of operation `op`.
  template <class Op>
  static auto io_executor(const Op& op) {
    return op.io_executor();
  }
  /// The slot Asio's cancellation of the operation goes through (on the I/O thread).
  template <class Sink>
  static asio::cancellation_slot cancellation_slot(Sink& sink) noexcept {
    return sink.cancellation_slot();
  }
  /// Stores the completion values and resumes the task when it may (on the I/O thread).
  template <class Sink, class... A>
  static void complete(Sink& sink, A&&... a) {
    sink.complete(std::forward<A>(a)...);
  }
  /// True once complete() stored the values.
  template <class Sink>
  static bool has_completed(const Sink& sink) noexcept {
    return sink.has_completed();
  }
  /// Resumes the task after a completion that waited for the relay's emit().
  template <class Sink>
  static void resume_after_stop(Sink& sink) noexcept {
    sink.resume_after_stop();
  }
  /// The task's token was stopped: cancels the operation (on the I/O thread).
  template <class Sink>
  static void on_stop(Sink& sink) {
    sink.on_stop();
  }
};

/// The Asio handler of a weft operation: forwards the completion values (error codes
/// in weft's categories, weft_value) to a sink (the awaiting operation object) and
/// exposes the sink's cancellation slot to Asio.
template <class Sink, class... Args>
class sink_handler {
 public:
  explicit sink_handler(Sink& sink) noexcept : m_sink(&sink) {}
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return sink_access::cancellation_slot(*m_sink); }
  void operator()(Args... args) { sink_access::complete(*m_sink, weft_value(std::move(args))...); }

 private:
  Sink* m_sink;
};

template <class T>
struct is_async_op : std::false_type {};

/// True when an initiation names the executor of the object it operates on (sockets,
/// acceptors, timers, resolvers and Asio's composed operations on them do).
template <class I>
concept has_io_executor = requires(const I& i) { i.get_executor(); };
/// That executor's type (int when there is none: nothing watches then).
template <class I>
struct io_executor_of {
  using type = int;
};
template <has_io_executor I>
struct io_executor_of<I> {
  using type = std::decay_t<decltype(std::declval<const I&>().get_executor())>;
};

/// Room for an object that cannot move (a std::stop_callback, an Asio cancellation
/// signal) inside one that must (an operation, before it is awaited): a copy or a move
/// is empty. Engaged only while the operation runs. Not thread-safe.
template <class T>
class pinned {
 public:
  pinned() noexcept = default;
  pinned(const pinned&) noexcept {}
  pinned& operator=(const pinned&) noexcept { return *this; }
  ~pinned() { reset(); }
  template <class... A>
  T& emplace(A&&... a) {
    ::new (static_cast<void*>(m_storage)) T(std::forward<A>(a)...);
    m_engaged = true;
    return get();
  }
  void reset() noexcept {
    if (m_engaged) {
      get().~T();
      m_engaged = false;
    }
  }
  explicit operator bool() const noexcept { return m_engaged; }
  T& get() noexcept { return *std::launder(reinterpret_cast<T*>(m_storage)); }
  T* operator->() noexcept { return &get(); }

 private:
  alignas(T) unsigned char m_storage[sizeof(T)];
  bool m_engaged = false;
};

/// The stop protocol of an Asio operation watched by a std::stop_token, for a `Sink`
/// (the awaitable: async_op, with_cancel's, with_timeout's) whose I/O executor is an
/// `Executor`. Everything but the callback runs on the operation's I/O thread, where
/// Asio's cancellation must be emitted: the callback (on the requesting thread) only
/// posts emit() there, which calls sink.on_stop() (emit_terminal(), or the sink's own
/// signal) unless the operation completed meanwhile. The sink resumes its task once
/// the operation completed and, when emit() was posted, once it ran too (it uses the
/// sink): then emit() calls sink.resume_after_stop(). The sink provides has_completed(),
/// on_stop() and resume_after_stop().
template <class Sink, class Executor>
class stop_relay {
 public:
  stop_relay(std::stop_token token, Executor ex) : m_token(std::move(token)), m_ex(std::move(ex)) {}

  /// On the I/O thread, after the operation started: listens to the token (runs the
  /// callback at once when it is stopped already).
  void listen(Sink& sink) { m_callback.emplace(m_token, fire{this, &sink}); }
  /// The relay's own slot, for a sink that has none (see emit_terminal).
  asio::cancellation_slot slot() noexcept { return m_signal.slot(); }
  /// Emits terminal cancellation into slot() (on the I/O thread).
  void emit_terminal() { m_signal.emit(asio::cancellation_type::terminal); }
  /// On the I/O thread, when the operation completed: stops listening; true when the
  /// sink may resume its task now (else emit() will, once it ran).
  bool completed() noexcept {
    // Unregistering waits for a callback running on another thread; afterwards m_fired
    // tells whether it posted emit(), which must run before the sink may go.
    m_callback.reset();
    return !m_fired.load(std::memory_order_acquire) || m_emit_ran;  // pairs with the release in fire
  }
  /// The executor the operation runs on.
  const Executor& executor() const noexcept { return m_ex; }

 private:
  struct fire {
    stop_relay* m_self;
    Sink* m_sink;
    void operator()() const noexcept {
      m_self->m_fired.store(true, std::memory_order_release);
      asio::post(m_self->m_ex, [self = m_self, sink = m_sink] { self->emit(*sink); });
    }
  };
  void emit(Sink& sink) {  // on the I/O thread
    m_emit_ran = true;
    if (sink_access::has_completed(sink)) {
      sink_access::resume_after_stop(sink);  // completed meanwhile and waited for this
    } else {
      sink_access::on_stop(sink);
    }
  }

  std::stop_token m_token;
  Executor m_ex;
  std::optional<std::stop_callback<fire>> m_callback;
  std::atomic<bool> m_fired{false};
  bool m_emit_ran = false;
  asio::cancellation_signal m_signal;
};

/// Names async_result's return_type, which Asio 1.22's token adapters
/// (bind_cancellation_slot, ...) declare a member with; the real result of an operation
/// is the async_op that initiate() returns. Never instantiated.
struct lazy_operation;

}  // namespace detail

/// The awaitable an Asio operation returns for use_task: the operation's initiation and
/// its arguments, started when awaited. Awaited once; not thread-safe (one owner).
template <class Initiation, class InitArgs, class... Args>
class [[nodiscard]] async_op {
 public:
  /// What co_await evaluates to: void, the one completion value, or a std::tuple of them.
  using result_type = typename detail::op_result<Args...>::type;
  /// The completion values as a tuple.
  using values_type = std::tuple<Args...>;

  /// Never ready: the operation starts in await_suspend.
  bool await_ready() const noexcept { return false; }
  /// Records the awaiting coroutine `h` (and the executor it awaits from) and starts the
  /// operation. When `h` is a weft task (or fiber) running under a stop token that can
  /// be stopped, and the operation's object provides its executor, the operation starts
  /// on that executor's thread (inline when already there) and a stop cancels it
  /// (Asio's terminal cancellation; the task sees weft::io::error::cancelled). Throws
  /// what the initiation throws.
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) {
    m_waiter.capture(h);
    if constexpr (k_watchable) {
      const std::stop_token* t = weft::detail::awaiting_token(h);
      if (t != nullptr && t->stop_possible()) {
        m_relay.emplace(*t, io_executor());
        asio::dispatch(m_relay->executor(), [this] {
          start(*this);
          m_relay->listen(*this);  // `this` stays until the task resumes: see complete()
        });
        return;
      }
    }
    start(*this);  // `this` may be gone once the completion ran on the I/O thread
  }
  /// The completion values: nothing, the one value, or a std::tuple of them.
  result_type await_resume() { return detail::op_result<Args...>::take(std::move(*m_values)); }

 private:
  friend struct detail::sink_access;
  static constexpr bool k_watchable = detail::has_io_executor<Initiation>;
  using relay_type = detail::stop_relay<async_op, typename detail::io_executor_of<Initiation>::type>;

  /// Made by asio::async_result<use_task_t, ...>::initiate.
  async_op(Initiation init, InitArgs args) : m_init(std::move(init)), m_args(std::move(args)) {}

  /// Starts the operation with a handler that completes into `sink`. The
  /// initiation and its arguments move to this stack frame first, so that the
  /// operation object is never touched after the initiation handed the handler on.
  /// Called once, by the awaiting thread or the operation's I/O thread.
  template <class Sink>
  void start(Sink& sink) {
    Initiation init = std::move(m_init);
    InitArgs args = std::move(m_args);
    std::apply([&](auto&... a) { std::move(init)(detail::sink_handler<Sink, Args...>(sink), std::move(a)...); }, args);
  }
  /// The I/O executor of the operation's object (for timers and cancellation).
  auto io_executor() const { return m_init.get_executor(); }

  /// Sink protocol: the slot of the stop relay while one watches the task's
  /// token, else none.
  asio::cancellation_slot cancellation_slot() noexcept {
    if constexpr (k_watchable) {
      if (m_relay) return m_relay->slot();
    }
    return {};
  }
  /// Sink protocol: stores the completion values and resumes the awaiting task
  /// (called once, on the thread that completes the operation; with a stop relay, once
  /// its posted cancellation, if any, ran too).
  void complete(Args... args) {
    m_values.emplace(std::move(args)...);
    if constexpr (k_watchable) {
      if (m_relay && !m_relay->completed()) return;  // the relay's emit() resumes
    }
    m_waiter.resume();
  }
  /// Stop relay protocol: true once complete() stored the values.
  bool has_completed() const noexcept { return m_values.has_value(); }
  /// Stop relay protocol: resumes the task after a completion that waited for
  /// the relay's emit().
  void resume_after_stop() noexcept { m_waiter.resume(); }
  /// Stop relay protocol: cancels the operation through the relay's slot.
  void on_stop() {
    if constexpr (k_watchable) m_relay->emit_terminal();
  }

  Initiation m_init;
  InitArgs m_args;
  detail::waiter m_waiter;
  std::optional<values_type> m_values;
  detail::pinned<relay_type> m_relay;  // only while a stop token is watched
};

namespace detail {
template <class Initiation, class InitArgs, class... Args>
struct is_async_op<async_op<Initiation, InitArgs, Args...>> : std::true_type {};
}  // namespace detail

/// True for what `asio_operation(..., use_task)` returns.
template <class T>
concept asio_operation = detail::is_async_op<std::remove_cvref_t<T>>::value;

}  // namespace weft::io

namespace asio {

/// use_task for the completion signature void(Args...): returns a lazy weft::io::async_op.
template <class... Args>
class async_result<weft::io::use_task_t, void(Args...)> {
 public:
  /// Only for Asio's token adapters (see detail::lazy_operation); initiate() really
  /// returns a weft::io::async_op.
  using return_type = weft::io::detail::lazy_operation;

  /// Called by Asio: packs `init` and `args` into a lazy weft::io::async_op; nothing
  /// starts until it is awaited. Thread-safe (no shared state).
  template <class Initiation, class... InitArgs>
  static auto initiate(Initiation&& init, weft::io::use_task_t, InitArgs&&... args) {
    using op =
        weft::io::async_op<std::decay_t<Initiation>, std::tuple<std::decay_t<InitArgs>...>, std::decay_t<Args>...>;
    return weft::io::detail::sink_access::make<op>(
        std::forward<Initiation>(init), std::tuple<std::decay_t<InitArgs>...>(std::forward<InitArgs>(args)...));
  }
};

}  // namespace asio
