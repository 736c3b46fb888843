// weft/stop.hpp: every weft wait watches the stop token of the task (or fiber) awaiting
// it. Each kind is stopped before it waits and while it waits, with its documented
// result (weft::cancelled, std::nullopt, false), and the primitive is left as if the
// wait had never been: nothing taken, nothing lost, no ghost waiter. Also: with_timeout
// over a lock and a channel pull, scopes counting stopped children, fibers' tokens.
#include <weft/stop.hpp>

#include <weft/barrier.hpp>
#include <weft/channel.hpp>
#include <weft/event.hpp>
#include <weft/fiber.hpp>
#include <weft/latch.hpp>
#include <weft/mutex.hpp>
#include <weft/pool.hpp>
#include <weft/scope.hpp>
#include <weft/semaphore.hpp>
#include <weft/spawn.hpp>
#include <weft/spawn_many.hpp>
#include <weft/spawn_tuple.hpp>
#include <weft/sync_wait.hpp>
#include <weft/timeout.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <system_error>
#include <thread>

using namespace std::chrono_literals;

namespace {

enum class outcome { done, stopped };

// Awaits `wait()` (an awaitable that throws weft::cancelled when stopped); marks
// `parked` just before.
template <class Wait>
weft::task<outcome> throwing_wait(Wait wait, std::atomic<int>* parked) {
  try {
    if (parked != nullptr) parked->fetch_add(1, std::memory_order_release);
    co_await wait();
    co_return outcome::done;
  } catch (const weft::cancelled&) {
    co_return outcome::stopped;
  }
}

weft::task<outcome> lock_once(weft::mutex& m, std::atomic<int>* parked) {
  try {
    if (parked != nullptr) parked->fetch_add(1, std::memory_order_release);
    auto guard = co_await m.lock();
    co_return outcome::done;
  } catch (const weft::cancelled&) {
    co_return outcome::stopped;
  }
}

weft::task<std::optional<int>> pull_once(weft::channel<int>& ch, std::atomic<int>* parked) {
  if (parked != nullptr) parked->fetch_add(1, std::memory_order_release);
  co_return co_await ch.pull();
}

weft::task<bool> push_once(weft::channel<int>& ch, int v, std::atomic<int>* parked) {
  if (parked != nullptr) parked->fetch_add(1, std::memory_order_release);
  co_return co_await ch.push(v);
}

// Runs `t` as the only child of a scope whose token is `tok`; its value (nullopt would
// mean the scope lost it: the checks compare against a value).
template <class T>
weft::task<std::optional<T>> under(std::stop_token tok, weft::task<T> t) {
  weft::scope<T> s{std::move(tok)};
  s.spawn(std::move(t));
  std::optional<T> v = co_await s.next();
  co_await s.join();
  co_return v;
}

// Runs the task make(&parked) on `pool` under a token that a plain thread stops once the
// task counted `parked` (just before its wait; usually it is queued by then, else it
// meets the stop when it parks); returns the task's value.
template <class T, class Make>
std::optional<T> stop_while_waiting(weft::executor& pool, Make make) {
  std::stop_source src;
  std::atomic<int> parked{0};
  std::thread stopper([&] {
    while (parked.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) std::this_thread::yield();  // more likely queued by now
    src.request_stop();
  });
  auto v = weft::sync_wait(pool, under(src.get_token(), make(&parked)));
  stopper.join();
  return v;
}

weft::task<void> lock_and_count(weft::mutex& m, std::atomic<int>& parked, std::atomic<int>& locked) {
  parked.fetch_add(1, std::memory_order_relaxed);
  auto g = co_await m.lock();
  locked.fetch_add(1, std::memory_order_relaxed);
}

weft::task<void> throws_cancelled() {
  throw weft::cancelled();
  co_return;
}

std::stop_token stopped_token() {
  static std::stop_source src = [] {
    std::stop_source s;
    s.request_stop();
    return s;
  }();
  return src.get_token();
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("stop: a wait under a stopped token ends at once, taking nothing", "[stop]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("mutex: weft::cancelled; the holder's unlock leaves it free") {
    weft::mutex m;
    auto held = m.try_lock_scoped();
    REQUIRE(held);
    CHECK(weft::sync_wait(pool, under(stopped_token(), lock_once(m, nullptr))) == outcome::stopped);
    held.unlock();
    CHECK(m.try_lock());  // no ghost waiter got it
    m.unlock();
  }
  SECTION("mutex: a free one is still taken (no wait, nothing to stop)") {
    weft::mutex m;
    CHECK(weft::sync_wait(pool, under(stopped_token(), lock_once(m, nullptr))) == outcome::done);
    CHECK(m.try_lock());
    m.unlock();
  }
  SECTION("semaphore: no permit taken, a later release is counted") {
    weft::semaphore sem{0};
    CHECK(weft::sync_wait(pool, under(stopped_token(), throwing_wait([&] { return sem.acquire(); }, nullptr))) ==
          outcome::stopped);
    sem.release();
    CHECK(sem.available() == 1);
  }
  SECTION("events and latch: weft::cancelled") {
    weft::manual_reset_event manual;
    weft::auto_reset_event autor;
    weft::latch l{1};
    CHECK(weft::sync_wait(pool, under(stopped_token(), throwing_wait([&] { return manual.wait(); }, nullptr))) ==
          outcome::stopped);
    CHECK(weft::sync_wait(pool, under(stopped_token(), throwing_wait([&] { return autor.wait(); }, nullptr))) ==
          outcome::stopped);
    CHECK(weft::sync_wait(pool, under(stopped_token(), throwing_wait([&] { return l.wait(); }, nullptr))) ==
          outcome::stopped);
    autor.set();
    CHECK(autor.try_wait());  // the signal was not taken by the stopped wait
  }
  SECTION("barrier: no arrival counted") {
    weft::barrier b{2};
    CHECK(weft::sync_wait(pool, under(stopped_token(), throwing_wait([&] { return b.arrive_and_wait(); }, nullptr))) ==
          outcome::stopped);
    CHECK(b.phase() == 0);
    std::thread other([&] { b.arrive_and_wait_blocking(); });
    b.arrive_and_wait_blocking();  // completes only with two real arrivals
    other.join();
    CHECK(b.phase() == 1);
  }
  SECTION("channel pull: nullopt, the channel stays open, a later element is kept") {
    weft::channel<int> ch;
    const auto pulled = weft::sync_wait(pool, under(stopped_token(), pull_once(ch, nullptr)));
    REQUIRE(pulled.has_value());
    CHECK_FALSE(pulled->has_value());
    CHECK_FALSE(ch.closed());
    CHECK(ch.try_push(7) == weft::channel_status::ok);
    int v = 0;
    CHECK(ch.try_pull(v) == weft::channel_status::ok);
    CHECK(v == 7);
  }
  SECTION("channel push to a full channel: false, the element not pushed") {
    weft::channel<int> ch{1};
    REQUIRE(ch.try_push(1) == weft::channel_status::ok);
    CHECK(weft::sync_wait(pool, under(stopped_token(), push_once(ch, 2, nullptr))) == false);
    int v = 0;
    CHECK(ch.try_pull(v) == weft::channel_status::ok);
    CHECK(v == 1);
    CHECK(ch.try_pull(v) == weft::channel_status::empty);
  }
}

TEMPLATE_LIST_TEST_CASE("stop: a waiting wait ends when its token is stopped", "[stop]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("mutex") {
    weft::mutex m;
    auto held = m.try_lock_scoped();
    CHECK(stop_while_waiting<outcome>(pool, [&](std::atomic<int>* p) { return lock_once(m, p); }) == outcome::stopped);
    held.unlock();  // had the waiter stayed queued, it would own the mutex now
    CHECK(m.try_lock());
    m.unlock();
  }
  SECTION("semaphore, events, latch, barrier") {
    weft::semaphore sem{0};
    weft::manual_reset_event manual;
    weft::auto_reset_event autor;
    weft::latch l{1};
    weft::barrier b{2};
    const auto stop = [&](auto wait) {
      return stop_while_waiting<outcome>(pool, [&](std::atomic<int>* p) { return throwing_wait(wait, p); });
    };
    CHECK(stop([&] { return sem.acquire(); }) == outcome::stopped);
    CHECK(stop([&] { return manual.wait(); }) == outcome::stopped);
    CHECK(stop([&] { return autor.wait(); }) == outcome::stopped);
    CHECK(stop([&] { return l.wait(); }) == outcome::stopped);
    CHECK(stop([&] { return b.arrive_and_wait(); }) == outcome::stopped);
    sem.release();
    CHECK(sem.available() == 1);  // not handed to the stopped waiter
    autor.set();
    CHECK(autor.try_wait());
    CHECK(b.phase() == 0);  // the withdrawn arrival does not complete a phase
  }
  SECTION("channel pull and push") {
    weft::channel<int> ch{1};
    const auto pulled =
        stop_while_waiting<std::optional<int>>(pool, [&](std::atomic<int>* p) { return pull_once(ch, p); });
    REQUIRE(pulled.has_value());
    CHECK_FALSE(pulled->has_value());
    CHECK(ch.try_push(1) == weft::channel_status::ok);  // stored: no stopped consumer took it
    CHECK(ch.size() == 1);
    CHECK(stop_while_waiting<bool>(pool, [&](std::atomic<int>* p) { return push_once(ch, 2, p); }) == false);
    int v = 0;
    CHECK(ch.try_pull(v) == weft::channel_status::ok);
    CHECK(v == 1);
    CHECK(ch.try_pull(v) == weft::channel_status::empty);  // the stopped push left nothing behind
  }
}

TEMPLATE_LIST_TEST_CASE("stop: with_timeout over a lock and a channel pull", "[stop][timeout]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("a lock held elsewhere: timed_out, no value; the loser never takes it") {
    weft::mutex m;
    auto held = m.try_lock_scoped();
    auto r = weft::sync_wait(pool, weft::with_timeout(m.lock(), 5ms));
    CHECK(r.ec == std::errc::timed_out);
    CHECK_FALSE(r.value.has_value());
    held.unlock();
    CHECK(m.try_lock());
    m.unlock();
  }
  SECTION("a free lock within the time: the guard") {
    weft::mutex m;
    auto r = weft::sync_wait(pool, weft::with_timeout(m.lock(), 1s));
    CHECK_FALSE(r.ec);
    REQUIRE(r.value.has_value());
    CHECK(r.value->owns_lock());
  }
  SECTION("an empty channel: timed_out; an element pushed afterwards stays there") {
    weft::channel<int> ch;
    auto r = weft::sync_wait(pool, weft::with_timeout(ch.pull(), 5ms));
    CHECK(r.ec == std::errc::timed_out);
    REQUIRE(r.value.has_value());  // the pull returned: with nullopt
    CHECK_FALSE(r.value->has_value());
    CHECK(ch.try_push(3) == weft::channel_status::ok);
    CHECK(ch.size() == 1);
  }
  SECTION("the caller's own stop is not a timeout: weft::cancelled goes on") {
    weft::mutex m;
    auto held = m.try_lock_scoped();
    const auto timed = [&]() -> weft::task<outcome> {
      try {
        auto r = co_await weft::with_timeout(m.lock(), 1h);
        co_return r.ec ? outcome::stopped : outcome::done;
      } catch (const weft::cancelled&) {
        co_return outcome::stopped;
      }
    };
    CHECK(weft::sync_wait(pool, under(stopped_token(), timed())) == outcome::stopped);
  }
}

TEMPLATE_LIST_TEST_CASE("stop: scopes count children ended by weft::cancelled as stopped", "[stop][scope]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("children waiting on a lock: request_stop, join rethrows nothing") {
    weft::mutex m;
    auto held = m.try_lock_scoped();
    std::atomic<int> parked{0}, locked{0};
    const bool reported =
        weft::sync_wait(pool, [](weft::mutex& mx, std::atomic<int>& p, std::atomic<int>& l) -> weft::task<bool> {
          weft::scope s;
          for (int i = 0; i < 100; ++i) s.spawn(lock_and_count(mx, p, l));
          s.request_stop();
          co_await s.join();            // rethrows nothing
          co_return co_await s.next();  // false: nothing to report, the children stopped
        }(m, parked, locked));
    CHECK_FALSE(reported);
    CHECK(parked.load() == 100);
    CHECK(locked.load() == 0);
    held.unlock();
    CHECK(m.try_lock());
    m.unlock();
  }
  SECTION("weft::cancelled thrown without a stop is an error like any other") {
    auto threw = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::scope s;
      s.spawn(throws_cancelled());
      try {
        co_await s.join();
      } catch (const weft::cancelled&) {
        co_return true;
      }
      co_return false;
    }());
    CHECK(threw);
  }
}

TEST_CASE("stop: weft::cancelled is std::errc::operation_canceled", "[stop]") {
  const weft::cancelled e;
  CHECK(e.code() == std::errc::operation_canceled);
  const std::system_error& as_system = e;
  CHECK(as_system.code() == std::errc::operation_canceled);
}

TEST_CASE("stop: a fiber runs under fiber_options::stop_token", "[stop][fiber]") {
  weft::thread_pool pool{{.threads = 2}};
  std::stop_source src;
  weft::channel<int> ch;
  weft::mutex m;
  auto held = m.try_lock_scoped();
  weft_test::gate waiting;
  auto h = weft::spawn_fiber(
      [&] {
        const bool inherited = weft::await(
            []() -> weft::task<bool> { co_return (co_await weft::this_task::stop_token()).stop_possible(); }());
        waiting.open();
        const std::optional<int> v = weft::await(ch.pull());  // ended by the stop
        bool lock_stopped = false;
        try {
          auto g = weft::await(m.lock());
        } catch (const weft::cancelled&) {
          lock_stopped = true;
        }
        return inherited && !v.has_value() && lock_stopped;
      },
      {.executor = &pool, .stop_token = src.get_token()});
  waiting.wait();
  src.request_stop();
  CHECK(weft::sync_wait(pool,
                        [](weft::fiber_handle<bool> f) -> weft::task<bool> { co_return co_await f; }(std::move(h))));
  CHECK(ch.try_push(1) == weft::channel_status::ok);
  CHECK(ch.size() == 1);
}

TEST_CASE("stop: a fiber without a token waits as before", "[stop][fiber]") {
  weft::thread_pool pool{{.threads = 2}};
  weft::channel<int> ch;
  auto h = weft::spawn_fiber([&] { return weft::await(ch.pull()).value_or(-1); }, {.executor = &pool});
  CHECK(ch.try_push(5) == weft::channel_status::ok);
  CHECK(weft::sync_wait(pool,
                        [](weft::fiber_handle<int> f) -> weft::task<int> { co_return co_await f; }(std::move(h))) == 5);
}

namespace {
weft::task<bool> sees(std::stop_token expected) {
  const std::stop_token mine = co_await weft::this_task::stop_token();
  co_return mine == expected;
}
weft::task<int> count_if_sees(std::stop_token expected) { co_return (co_await sees(expected)) ? 1 : 0; }

// Awaits every awaited spawn form under the scope's token and counts the children that
// see it (all of them must), plus one .fork() child (which runs under none: not counted).
weft::task<int> awaited_forms(weft::executor& other) {
  const std::stop_token tok = co_await weft::this_task::stop_token();
  int n = 0;
  n += co_await count_if_sees(tok);                             // plain co_await
  n += co_await weft::spawn(count_if_sees(tok));                // inline spawn
  n += co_await weft::spawn(count_if_sees(tok)).run_on(other);  // forked and joined
  n += co_await weft::spawn(count_if_sees(tok)).priority(1);
  for (int v : co_await weft::spawn_many(3, [&](std::size_t) { return count_if_sees(tok); })) n += v;
  for (int v : co_await weft::spawn_many(3, [&](std::size_t) { return count_if_sees(tok); }).run_on(other)) n += v;
  auto [a, b] = co_await weft::spawn_tuple(count_if_sees(tok), count_if_sees(tok));
  n += a + b;
  auto [c, d] = co_await weft::spawn_tuple(count_if_sees(tok), count_if_sees(tok)).run_on(other);
  n += c + d;
  auto forked = weft::spawn(sees(std::stop_token{})).fork();  // .fork(): no token (weft/stop.hpp)
  if (co_await forked) n += 100;
  co_return n;
}
}  // namespace

TEST_CASE("stop: children of every awaited spawn form inherit the awaiting task's token", "[stop][spawn]") {
  weft::thread_pool pool{{.threads = 2}};
  weft::thread_pool other{{.threads = 2}};
  auto n = weft::sync_wait(pool, [](weft::executor& o) -> weft::task<int> {
    weft::scope<int> s;
    s.spawn(awaited_forms(o));
    auto v = co_await s.next();
    co_await s.join();
    co_return v.value_or(-1);
  }(other));
  CHECK(n == 1 + 1 + 1 + 1 + 3 + 3 + 2 + 2 + 100);
}
