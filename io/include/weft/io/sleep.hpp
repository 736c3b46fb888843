// weft/io/sleep.hpp: timers of the io_uring backend.
//
//   std::error_code ec = co_await weft::io::sleep_for(ctx, 10ms);
#pragma once

#include <chrono>
#include <system_error>

#include "weft/io/uring_context.hpp"

namespace weft::io {

namespace detail {
/// An io_uring timeout: {} when the time is up, operation_canceled when cancelled.
class sleep_awaitable : public uring_awaitable {
 public:
  sleep_awaitable(uring_context& ctx, std::int64_t ns, bool absolute) noexcept;
  std::error_code await_resume() const noexcept;
};
}  // namespace detail

/// Suspends the calling task for `d` (at least; rounded to nanoseconds; <= 0 yields
/// once through the loop) on `ctx`'s timer, then resumes it on the executor it awaited
/// from. Awaitable from any thread. Yields {} on expiry.
template <class Rep, class Period>
detail::sleep_awaitable sleep_for(uring_context& ctx, std::chrono::duration<Rep, Period> d) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return {ctx, ns < 0 ? 0 : static_cast<std::int64_t>(ns), false};
}

/// Suspends the calling task until `t` on std::chrono::steady_clock (CLOCK_MONOTONIC),
/// like sleep_for (awaitable from any thread; a time already past yields once through
/// the loop).
template <class Duration>
detail::sleep_awaitable sleep_until(uring_context& ctx,
                                    std::chrono::time_point<std::chrono::steady_clock, Duration> t) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return {ctx, ns < 0 ? 0 : static_cast<std::int64_t>(ns), true};
}

}  // namespace weft::io
