// weft/spawn_tuple.hpp: run a fixed set of differently-typed tasks in parallel.
#pragma once

#include <array>
#include <coroutine>
#include <exception>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/detail/bulk.hpp"
#include "weft/detail/fork.hpp"
#include "weft/task.hpp"

namespace weft {

namespace detail {

/// A void task's slot in spawn_tuple's result.
template <class T>
using tuple_slot_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
tuple_slot_t<T> take_slot(task<T>& t) {
  if constexpr (std::is_void_v<T>) {
    t.handle().promise().m_result.take();
    return {};
  } else {
    return t.handle().promise().m_result.take();
  }
}

template <class... Ts>
task<std::tuple<tuple_slot_t<Ts>...>> spawn_tuple_impl(task<Ts>... ts) {
  constexpr std::size_t n = sizeof...(Ts);
  // Children 0..n-2 are forked (one bulk publication), the last runs inline, then the
  // forked ones are joined newest first (see weft/detail/bulk.hpp).
  std::array<promise_base*, n> ps{&ts.handle().promise()...};
  std::array<std::coroutine_handle<>, n> hs{std::coroutine_handle<>(ts.handle())...};
  {
    worker_context* w = t_worker;
    const unsigned prio = t_prio;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      ps[i]->m_mode = completion::forked;
      if (w != nullptr && w->m_deques[prio].free_slots() > 0) {
        ps[i]->m_prio = ps[i]->m_parent_prio = static_cast<std::uint8_t>(prio);
        w->m_deques[prio].push(hs[i].address());
      } else {
        enqueue_child(*ps[i], hs[i], k_inherit_priority, nullptr);
      }
    }
    if (w != nullptr && n > 1) {
      split_deque& d = w->m_deques[prio];
      if (d.share_requested()) on_work_available(*w, d);
    }
  }
  [[maybe_unused]] auto join = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    using P = typename task<std::tuple_element_t<I, std::tuple<Ts...>>>::promise_type;
    return join_awaiter<P>{std::get<I>(std::tie(ts...)).handle()};
  };
  {
    auto& last = std::get<n - 1>(std::tie(ts...));
    co_await run_inline_awaiter<typename std::remove_reference_t<decltype(last)>::promise_type>{last.handle()};
  }
  co_await [&]<std::size_t... I>(std::index_sequence<I...>) -> task<void> {
    // join n-2 .. 0
    constexpr std::size_t m = sizeof...(I);
    (co_await join(std::integral_constant<std::size_t, m - 1 - I>{}), ...);
  }(std::make_index_sequence<n - 1>{});
  std::exception_ptr first;
  ((first == nullptr && ts.handle().promise().m_result.has_error() ? (void)(first = ts.handle().promise().m_result.error())
                                                                   : void()),
   ...);
  if (first) std::rethrow_exception(first);
  co_return std::tuple<tuple_slot_t<Ts>...>{take_slot(ts)...};
}

}  // namespace detail

/// Runs the tasks in parallel (all but the last queued where thieves can take them, the
/// last inline) and evaluates to std::tuple of their results (std::monostate for a void
/// task). The first (leftmost) exception is rethrown after every task finished.
/// Throws std::logic_error if a task is empty. Call from a weft task.
template <class... Ts>
  requires(sizeof...(Ts) > 0)
task<std::tuple<detail::tuple_slot_t<Ts>...>> spawn_tuple(task<Ts>... ts) {
  if (!(ts.valid() && ...)) detail::throw_bad_await("weft::spawn_tuple: empty or moved-from task");
  return detail::spawn_tuple_impl(std::move(ts)...);
}

}  // namespace weft
