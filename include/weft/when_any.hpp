// weft/when_any.hpp: weft::when_any, the first of several awaitables to finish.
//
// What cancellation means here. when_any runs every operand in parallel (each in its
// own forked task on the caller's executor), under a stop token of its own
// (weft/stop.hpp) that is stopped when the caller's token is, when the std::stop_source
// given to when_any is, and when a winner is known. The first to finish, with a value
// or an exception, wins; when_any then stops that token, calls request_stop() on the
// std::stop_source it was given, and waits for the losers to finish before it resumes
// the caller. Losers are never destroyed mid-flight (a suspended coroutine cannot be
// torn down safely from outside): every weft wait they are in (a channel pull or push,
// a lock, an event, io_uring and Asio I/O) ends by itself, in its documented stopped
// way; other code observes the token (co_await weft::this_task::stop_token(), or the
// given source's token) and returns early. Their results and exceptions are dropped,
// except that a losing operand whose awaiter has `give_back(value)` gets its value
// handed back: a channel pull() that took an element after all (it was served as the
// winner was decided) returns it to the front of its channel, so no element is lost.
// So when_any is structured: when `co_await weft::when_any(...)` returns, nothing it
// started is still running, nothing leaked, and the operands may safely refer to the
// caller's locals. The price: a loser that ignores the stop delays the caller until it
// finishes by itself.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "weft/fork_group.hpp"
#include "weft/stop.hpp"
#include "weft/task.hpp"

namespace weft {

/// The winner of a when_any: its position among the operands and its value
/// (std::monostate for a void operand; for the variadic form a std::variant whose
/// alternative `index` is set). A plain value (no synchronization).
template <class T>
struct when_any_result {
  std::size_t index;  ///< position of the winner among the operands, from 0
  T value;            ///< the winner's value
};

namespace detail {

template <class A>
decltype(auto) awaiter_of(A&& a) {
  if constexpr (requires { std::forward<A>(a).operator co_await(); })
    return std::forward<A>(a).operator co_await();
  else
    return std::forward<A>(a);
}

/// What `co_await a` evaluates to for an rvalue `a` (member operator co_await or a
/// plain awaiter), void mapped to std::monostate, references decayed.
template <class A>
using await_value_t =
    std::conditional_t<std::is_void_v<decltype(awaiter_of(std::declval<A>()).await_resume())>, std::monostate,
                       std::decay_t<decltype(awaiter_of(std::declval<A>()).await_resume())>>;

/// The race's shared state; lives in the when_any coroutine, which outlives every child.
template <class V>
struct race {
  static constexpr std::size_t k_none = static_cast<std::size_t>(-1);
  std::atomic<std::size_t> m_winner{k_none};
  std::optional<V> m_value;
  std::exception_ptr m_error;
  std::stop_source* m_stop = nullptr;  // given to when_any, or null
  // The operands' token: stopped by stop_losers() and, through the links, by the
  // caller's token and by m_stop. Members are destroyed in reverse order: the links go
  // before the source they forward to.
  std::stop_source m_own;
  const std::stop_token m_token = m_own.get_token();
  std::optional<std::stop_callback<stop_forward>> m_caller_link;
  std::optional<std::stop_callback<stop_forward>> m_source_link;

  /// Links the operands' token to the caller's (and to m_stop); runs the forward at
  /// once when either is stopped already. Before any operand starts.
  void link(std::stop_token caller) noexcept {
    if (caller.stop_possible()) m_caller_link.emplace(std::move(caller), stop_forward{&m_own});
    if (m_stop != nullptr) m_source_link.emplace(m_stop->get_token(), stop_forward{&m_own});
  }
  /// True for exactly one caller: the first child to finish. The fork_group join
  /// publishes what the winner then writes to the awaiting coroutine.
  bool try_win(std::size_t i) noexcept {
    std::size_t none = k_none;
    return m_winner.compare_exchange_strong(none, i, std::memory_order_acq_rel, std::memory_order_relaxed);
  }
  void stop_losers() noexcept {
    m_own.request_stop();
    if (m_stop != nullptr) m_stop->request_stop();
  }
};

/// Makes the awaiting task run under `m_tok` from here on (a forked task starts with
/// none). Never suspends. Used once by its co_await.
struct adopt_token {
  const std::stop_token* m_tok;
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    h.promise().m_stop = m_tok;  // the race outlives the child
    return false;
  }
  void await_resume() const noexcept {}
};

/// A loser's value `v`, unused: handed back to its awaiter `a` where that has
/// give_back (a channel pull returns the element to its channel), else dropped.
template <class A, class T>
void give_back_unused(A& a, T&& v) noexcept {
  if constexpr (requires { a.give_back(std::move(v)); }) {
    try {
      a.give_back(std::move(v));
    } catch (...) {
      // Out of memory handing it back: the value is dropped, as any loser's is.
    }
  }
}

/// One operand, run to completion under the race's token; `emplace(race, value)`
/// stores a winning value.
template <class V, class A, class Emplace>
task<void> race_child(A a, race<V>& r, std::size_t i, Emplace emplace) {
  co_await adopt_token{&r.m_token};
  try {
    if constexpr (std::is_void_v<decltype(awaiter_of(std::move(a)).await_resume())>) {
      co_await std::move(a);
      if (r.try_win(i)) {
        emplace(r, std::monostate{});
        r.stop_losers();
      }
    } else {
      auto v = co_await std::move(a);
      if (r.try_win(i)) {
        emplace(r, std::move(v));
        r.stop_losers();
      } else {
        give_back_unused(a, std::move(v));
      }
    }
  } catch (...) {
    if (r.try_win(i)) {
      r.m_error = std::current_exception();
      r.stop_losers();
    }
  }
}

/// Joins the operands forked so far. If starting one failed (`fork_error`: an operand's
/// move threw, no memory, the executor shuts down), the ones already running are asked
/// to stop first: they use `r` and the caller's objects, so they must all finish before
/// the error leaves when_any.
template <class V>
task<void> settle_forks(fork_group<void>& g, race<V>& r, const std::exception_ptr& fork_error) {
  if (fork_error) r.stop_losers();
  co_await g.join();
}

template <class V>
when_any_result<V> race_result(race<V>& r) {
  if (r.m_error) std::rethrow_exception(r.m_error);
  return when_any_result<V>{r.m_winner.load(std::memory_order_relaxed), std::move(*r.m_value)};
}

template <class... A, std::size_t... I>
task<when_any_result<std::variant<await_value_t<A>...>>> when_any_variadic(std::stop_source* stop,
                                                                           std::index_sequence<I...>, A... as) {
  using V = std::variant<await_value_t<A>...>;
  race<V> r;
  r.m_stop = stop;
  r.link(co_await this_task::stop_token());
  std::exception_ptr fork_error;
  {
    fork_group<void> g;
    try {
      (g.fork(race_child<V>(std::move(as), r, I,
                            [](race<V>& rr, auto&& v) { rr.m_value.emplace(std::in_place_index<I>, std::move(v)); })),
       ...);
    } catch (...) {
      fork_error = std::current_exception();
    }
    co_await settle_forks(g, r, fork_error);
  }
  if (fork_error) std::rethrow_exception(fork_error);
  co_return race_result(r);
}

template <class A>
task<when_any_result<await_value_t<A>>> when_any_range(std::stop_source* stop, std::vector<A> as) {
  using V = await_value_t<A>;
  if (as.empty()) throw std::invalid_argument("weft::when_any: no operands");
  race<V> r;
  r.m_stop = stop;
  r.link(co_await this_task::stop_token());
  std::exception_ptr fork_error;
  {
    fork_group<void> g;
    try {
      for (std::size_t i = 0; i < as.size(); ++i)
        g.fork(race_child<V>(std::move(as[i]), r, i, [](race<V>& rr, auto&& v) { rr.m_value.emplace(std::move(v)); }));
    } catch (...) {
      fork_error = std::current_exception();
    }
    co_await settle_forks(g, r, fork_error);
  }
  if (fork_error) std::rethrow_exception(fork_error);
  co_return race_result(r);
}

}  // namespace detail

/// `co_await weft::when_any(stop, a, b, ...)`: runs the awaitables (tasks, or anything
/// with await_ready/await_suspend/await_resume or a member operator co_await) in
/// parallel, under a token that the caller's token and `stop` stop; the first to finish
/// wins, the operands' token is stopped and `stop.request_stop()` is called, and once
/// every loser has finished too it evaluates to {index, std::variant<values...>} (the
/// winner's alternative, std::monostate for void), or rethrows the winner's exception.
/// Losers' results and exceptions are dropped (a losing channel pull hands its element
/// back to the channel). See the file comment for what cancellation means.
/// Call from a weft task; operands are moved in. The operands run at once, possibly on
/// different threads of the caller's executor: anything they share must be
/// thread-safe. `stop` must outlive the await; request_stop() may be called on it from
/// any thread.
template <class... A>
  requires(sizeof...(A) >= 1)
auto when_any(std::stop_source& stop, A... as) {
  return detail::when_any_variadic(&stop, std::index_sequence_for<A...>{}, std::move(as)...);
}

/// when_any without a stop source: the operands run under when_any's own token, stopped
/// when the caller's is and when a winner is known (so a loser waiting in a weft wait
/// ends at once); code that watches no token is only waited for. Same threading as the
/// form above.
template <class... A>
  requires(sizeof...(A) >= 1 && (!std::is_same_v<std::remove_cvref_t<A>, std::stop_source> && ...))
auto when_any(A... as) {
  return detail::when_any_variadic(nullptr, std::index_sequence_for<A...>{}, std::move(as)...);
}

/// Range form: operands of one type in a vector; evaluates to {index, value}. Throws
/// std::invalid_argument for an empty vector. Same threading as the variadic form.
template <class A>
auto when_any(std::stop_source& stop, std::vector<A> as) {
  return detail::when_any_range(&stop, std::move(as));
}

/// Range form without a stop source. Same threading as the variadic form.
template <class A>
auto when_any(std::vector<A> as) {
  return detail::when_any_range(nullptr, std::move(as));
}

}  // namespace weft
