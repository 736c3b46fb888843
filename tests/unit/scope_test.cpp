// weft/scope.hpp and weft/stop.hpp: spawning and reaping, join, next, the stop token
// (inherited by co_await, stopped by request_stop and by a parent token), the error
// policies, next() and join() rethrowing only once no child is alive, with_scope,
// keep_values, spawn(spawn_op) on another executor, and a scope destroyed unjoined.
#include <weft/scope.hpp>

#include <weft/event.hpp>
#include <weft/latch.hpp>
#include <weft/pool.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

namespace {

using weft_test::tracker;

weft::task<void> bump(std::atomic<int>& n, tracker) {
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

weft::task<int> square(int i) { co_return i* i; }

weft::task<void> fails(int i) {
  throw std::runtime_error("child " + std::to_string(i));
  co_return;
}

// Suspends until the task's token is stopped: a stop_callback sets an event the task
// waits on (the cooperative shape of weft/stop.hpp for a wait that does not watch the
// token itself).
// Waits on an event nobody sets: only the stop ends the wait (weft::cancelled, which
// the scope counts as stopped, not failed).
weft::task<void> wait_for_stop(std::atomic<int>& ended) {
  weft::manual_reset_event never;
  try {
    co_await never.wait();
  } catch (const weft::cancelled&) {
    ended.fetch_add(1, std::memory_order_relaxed);
    throw;
  }
}

// Waits until stopped, then ends normally with 7 (a value after the stop).
weft::task<int> seven_after_stop() {
  weft::manual_reset_event never;
  try {
    co_await never.wait();
  } catch (const weft::cancelled&) {
  }
  co_return 7;
}

// A child's value that counts its live copies.
struct tracked_value {
  tracker t;
  int v;
};
weft::task<tracked_value> make_tracked(std::atomic<int>& live, int v) { co_return tracked_value{tracker{live}, v}; }

// Nested co_await: the inner task sees the outer one's token.
weft::task<bool> inner_sees_stop() { co_return co_await weft::this_task::stop_requested(); }
weft::task<std::stop_token> inner_token() { co_return co_await weft::this_task::stop_token(); }
// Records its token and the one a task it awaits sees, then waits until stopped.
weft::task<void> record_token_then_wait(std::mutex& m, std::vector<std::pair<std::stop_token, std::stop_token>>& out,
                                        weft::latch& recorded, std::atomic<int>& ended) {
  std::stop_token mine = co_await weft::this_task::stop_token();
  std::stop_token inner = co_await inner_token();
  {
    std::lock_guard lock(m);
    out.emplace_back(std::move(mine), std::move(inner));
  }
  recorded.count_down();
  co_await wait_for_stop(ended);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("scope: spawn, join, reaping", "[scope]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("every child runs once; join waits for all; size counts the alive") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto ok = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope s;
      const bool empty = s.size() == 0;
      for (int i = 0; i < 1000; ++i) s.spawn(bump(ran, tracker{live}));
      co_await s.join();
      const bool all = ran.load() == 1000 && s.size() == 0 && live.load() == 0;
      s.spawn(bump(ran, tracker{live}));  // reusable after a join
      co_await s.join();
      co_return empty&& all&& ran.load() == 1001;
    }());
    CHECK(ok);
    CHECK(live.load() == 0);
  }

  SECTION("a child's frame is freed as soon as it finishes, before any join") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto ok = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope s;
      bool bounded = true;
      for (int batch = 0; batch < 50; ++batch) {
        for (int i = 0; i < 200; ++i) s.spawn(bump(ran, tracker{live}));
        for (;;) {  // the awaited value in a variable first: g++-12.2 (README, requirements)
          const bool got = co_await s.next();
          if (!got) break;
        }
        bounded = bounded && live.load() == 0 && s.size() == 0;  // never joined in between
      }
      co_await s.join();
      co_return bounded&& ran.load() == 50 * 200;
    }());
    CHECK(ok);
  }

  SECTION("scope<T>::next hands over every value once, then nullopt") {
    auto sum = weft::sync_wait(pool, []() -> weft::task<long> {
      weft::scope<int> s;
      for (int i = 0; i < 500; ++i) s.spawn(square(i));
      long total = 0;
      int count = 0;
      for (;;) {
        const auto v = co_await s.next();
        if (!v) break;
        total += *v;
        ++count;
      }
      co_await s.join();
      co_return count == 500 ? total : -1;
    }());
    long expect = 0;
    for (int i = 0; i < 500; ++i) expect += static_cast<long>(i) * i;
    CHECK(sum == expect);
  }

  SECTION("next on an empty scope ends at once") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::scope s;
      weft::scope<int> v;
      const bool a = co_await s.next();
      const auto b = co_await v.next();
      co_return !a && !b.has_value();
    }());
    CHECK(r);
  }
}

TEMPLATE_LIST_TEST_CASE("scope: the stop token", "[scope][stop]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("request_stop ends every waiting child; join returns") {
    std::atomic<int> ended{0};
    constexpr int k_children = 10'000;
    auto ms = weft::sync_wait(pool, [&]() -> weft::task<long> {
      weft::scope s;
      for (int i = 0; i < k_children; ++i) s.spawn(wait_for_stop(ended));
      const auto t0 = std::chrono::steady_clock::now();
      s.request_stop();
      co_await s.join();
      co_return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    }());
    CHECK(ended.load() == k_children);
    WARN("10,000 waiting children stopped and joined in " << ms << " ms");
  }

  SECTION("children spawned after the stop see it at once") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::scope<bool> s;
      s.request_stop();
      s.spawn(inner_sees_stop());
      auto v = co_await s.next();
      co_await s.join();
      co_return v.has_value() && *v&& s.stop_requested();
    }());
    CHECK(r);
  }

  SECTION("each child runs under a token of its own, inherited through co_await, stopped by the scope's") {
    std::mutex m;
    std::vector<std::pair<std::stop_token, std::stop_token>> seen;
    std::atomic<int> ended{0};
    weft::latch recorded{2};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope s;
      s.spawn(record_token_then_wait(m, seen, recorded, ended));
      s.spawn(record_token_then_wait(m, seen, recorded, ended));
      co_await recorded.wait();  // both children have recorded their tokens
      std::vector<std::pair<std::stop_token, std::stop_token>> t;
      {
        std::lock_guard lock(m);
        t = seen;
      }
      const bool inherited = t[0].first == t[0].second && t[1].first == t[1].second;
      const bool own = t[0].first.stop_possible() && t[0].first != s.get_token() && t[0].first != t[1].first;
      const bool not_yet = !t[0].first.stop_requested() && !t[1].first.stop_requested();
      s.request_stop();
      co_await s.join();
      co_return inherited&& own&& not_yet&& t[0].first.stop_requested() && t[1].first.stop_requested();
    }());
    CHECK(r);
    CHECK(ended.load() == 2);
  }

  SECTION("a task outside any scope runs under no token") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      std::stop_token tok = co_await inner_token();
      const bool stopped = co_await weft::this_task::stop_requested();
      co_return !tok.stop_possible() && !stopped;
    }());
    CHECK(r);
  }

  SECTION("a parent token stops the scope's children") {
    std::stop_source parent;
    std::atomic<int> ended{0};
    std::atomic<bool> spawned{false};
    std::thread stopper([&] {
      while (!spawned.load(std::memory_order_acquire)) std::this_thread::yield();
      parent.request_stop();
    });
    weft::sync_wait(pool, [&]() -> weft::task<void> {
      weft::scope s{parent.get_token()};
      for (int i = 0; i < 100; ++i) s.spawn(wait_for_stop(ended));
      spawned.store(true, std::memory_order_release);
      co_await s.join();
    }());
    stopper.join();
    CHECK(ended.load() == 100);
  }
}

TEMPLATE_LIST_TEST_CASE("scope: exceptions by policy", "[scope]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("rethrow_first: join rethrows one exception, once; every child ran") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<int> {
      weft::scope s;
      for (int i = 0; i < 10; ++i) {
        s.spawn(fails(i));
        s.spawn(bump(ran, tracker{live}));
      }
      int caught = 0;
      try {
        co_await s.join();
      } catch (const std::runtime_error&) {
        ++caught;
      }
      co_await s.join();  // the exception was rethrown once
      co_return caught;
    }());
    CHECK(r == 1);
    CHECK(ran.load() == 10);
  }

  SECTION("next rethrows it too, and the values still come") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::scope<int> s;
      s.spawn([]() -> weft::task<int> {
        throw std::runtime_error("x");
        co_return 0;
      }());
      s.spawn(square(3));
      int values = 0;
      int errors = 0;
      for (;;) {
        try {
          auto v = co_await s.next();
          if (!v) break;
          values += *v == 9 ? 1 : 100;
        } catch (const std::runtime_error&) {
          ++errors;
        }
      }
      co_await s.join();
      co_return values == 1 && errors == 1;
    }());
    CHECK(r);
  }

  SECTION("collect: nothing is rethrown, take_errors has every exception") {
    auto n = weft::sync_wait(pool, []() -> weft::task<std::size_t> {
      weft::scope s{{.policy = weft::scope_policy::collect}};
      for (int i = 0; i < 25; ++i) s.spawn(fails(i));
      co_await s.join();
      auto errs = s.take_errors();
      for (auto& e : errs) {
        try {
          std::rethrow_exception(e);
        } catch (const std::runtime_error&) {
          continue;
        }
      }
      co_return errs.size() + s.take_errors().size();
    }());
    CHECK(n == 25);
  }

  SECTION("stop_on_error: the first exception stops the siblings") {
    std::atomic<int> ended{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope s{{.policy = weft::scope_policy::stop_on_error}};
      for (int i = 0; i < 50; ++i) s.spawn(wait_for_stop(ended));
      s.spawn(fails(0));
      bool threw = false;
      try {
        co_await s.join();
      } catch (const std::runtime_error&) {
        threw = true;
      }
      co_return threw&& s.stop_requested();
    }());
    CHECK(r);
    CHECK(ended.load() == 50);
  }
}

TEST_CASE("scope: spawn(spawn_op) runs the child on the executor and priority it names", "[scope]") {
  weft::thread_pool home{{.threads = 1}};
  weft::thread_pool other{{.threads = 1, .priorities = 3}};
  auto r = weft::sync_wait(home, [&]() -> weft::task<bool> {
    weft::scope<bool> s;
    s.spawn(weft::spawn([](weft::executor& ex) -> weft::task<bool> {
              co_return ex.owns_current_thread() && weft::current_priority() == 2;
            }(other))
                .run_on(other)
                .priority(2));
    auto v = co_await s.next();
    co_await s.join();
    co_return v.value_or(false) && home.owns_current_thread();
  }());
  CHECK(r);
}

TEST_CASE("scope: misuse", "[scope]") {
  weft::thread_pool pool{{.threads = 2}};

  SECTION("an empty task is refused and nothing is counted") {
    auto r = weft::sync_wait(pool, []() -> weft::task<bool> {
      weft::scope s;
      bool threw = false;
      try {
        s.spawn(weft::task<void>{});
      } catch (const std::logic_error&) {
        threw = true;
      }
      co_await s.join();
      co_return threw&& s.size() == 0;
    }());
    CHECK(r);
  }

  SECTION("a bad priority throws from spawn and the child never runs") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<bool> {
      weft::scope s;
      bool threw = false;
      try {
        s.spawn(weft::spawn(bump(ran, tracker{live})).priority(99));
      } catch (const std::out_of_range&) {
        threw = true;
      }
      co_await s.join();
      co_return threw&& s.size() == 0;
    }());
    CHECK(r);
    CHECK(ran.load() == 0);
    CHECK(live.load() == 0);
  }

  SECTION("destroying a scope with children alive stops them and says so; they end detached") {
    // stderr goes to a file for the scope's message (the destructor writes it on this
    // thread, before it returns).
    std::FILE* capture = std::tmpfile();
    REQUIRE(capture != nullptr);
    std::fflush(stderr);
    const int saved = ::dup(2);
    REQUIRE(saved >= 0);
    ::dup2(::fileno(capture), 2);
    auto ended = std::make_shared<std::atomic<int>>(0);  // outlives the test body if it must
    auto s = std::make_unique<weft::scope<int>>();
    weft::manual_reset_event never;  // lives on until the children ended (checked below)
    for (int i = 0; i < 4; ++i)
      s->spawn([](std::shared_ptr<std::atomic<int>> n, weft::manual_reset_event& ev) -> weft::task<int> {
        try {
          co_await ev.wait();
        } catch (const weft::cancelled&) {
          n->fetch_add(1, std::memory_order_relaxed);
          co_return 1;  // a value for a scope that is gone: dropped
        }
        co_return 0;
      }(ended, never));
    s->spawn(square(2));
    s.reset();
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::string text;
    std::rewind(capture);
    char buf[256];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, capture)) > 0;) text.append(buf, n);
    std::fclose(capture);
    CHECK(weft_test::eventually([&] { return ended->load() == 4; }));
    CHECK(text.find("weft::scope: destroyed with ") != std::string::npos);
    CHECK(text.find("asked to stop") != std::string::npos);
  }
}

TEMPLATE_LIST_TEST_CASE("scope: a child's exception reaches the owner's catch after its siblings are stopped",
                        "[scope]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("scope<void>: next() stops the other children, waits for them, then rethrows") {
    std::atomic<int> ended{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<int> {
      try {
        weft::scope<> s;
        s.spawn(fails(0));
        for (int i = 1; i < 4; ++i) s.spawn(wait_for_stop(ended));
        for (;;) {
          const bool got = co_await s.next();
          if (!got) break;
        }
      } catch (const std::runtime_error&) {
        co_return ended.load();  // every sibling had ended when the exception came
      }
      co_return -1;
    }());
    CHECK(r == 3);
  }

  SECTION("scope<int>: the values of children that ended after the stop are still handed over") {
    auto r = weft::sync_wait(pool, []() -> weft::task<std::pair<std::size_t, int>> {
      weft::scope<int> s;
      s.spawn([]() -> weft::task<int> {
        throw std::runtime_error("child 0");
        co_return 0;
      }());
      for (int i = 1; i < 4; ++i) s.spawn(seven_after_stop());
      std::size_t alive_at_catch = 99;
      int sum = 0;
      for (;;) {
        try {
          const auto v = co_await s.next();
          if (!v) break;
          sum += *v;
        } catch (const std::runtime_error&) {
          alive_at_catch = s.size();
        }
      }
      co_await s.join();
      co_return std::pair{alive_at_catch, sum};
    }());
    CHECK(r.first == 0);
    CHECK(r.second == 21);
  }

  SECTION("stop_on_error: next() rethrows once every child has ended") {
    std::atomic<int> ended{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<int> {
      weft::scope<> s{{.policy = weft::scope_policy::stop_on_error}};
      for (int i = 0; i < 20; ++i) s.spawn(wait_for_stop(ended));
      s.spawn(fails(0));
      try {
        for (;;) {
          const bool got = co_await s.next();
          if (!got) break;
        }
      } catch (const std::runtime_error&) {
        co_return s.size() == 0 ? ended.load() : -1;
      }
      co_return -2;
    }());
    CHECK(r == 20);
  }
}

TEMPLATE_LIST_TEST_CASE("scope: an exception of the owner unwinds through a scope with children alive", "[scope]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("with_scope: the children are stopped and have ended when the exception arrives") {
    std::atomic<int> ended{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<int> {
      try {
        co_await weft::with_scope([&](weft::scope<>& s) -> weft::task<void> {
          for (int i = 0; i < 8; ++i) s.spawn(wait_for_stop(ended));
          throw std::runtime_error("owner");
          co_return;
        });
      } catch (const std::runtime_error&) {
        co_return ended.load();
      }
      co_return -1;
    }());
    CHECK(r == 8);
  }

  SECTION("a plain scope: the children are stopped and end detached; the exception goes on") {
    std::atomic<int> ended{0};
    bool caught = false;
    try {
      weft::sync_wait(pool, [&]() -> weft::task<void> {
        weft::scope<> s;
        for (int i = 0; i < 8; ++i) s.spawn(wait_for_stop(ended));
        throw std::runtime_error("owner");
        co_return;
      }());
    } catch (const std::runtime_error&) {
      caught = true;
    }
    CHECK(caught);
    CHECK(weft_test::eventually([&] { return ended.load() == 8; }));
  }
}

TEMPLATE_LIST_TEST_CASE("scope: with_scope", "[scope]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);

  SECTION("the body's value comes back once every child has ended on its own") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<std::pair<int, int>> {
      const int from_body = co_await weft::with_scope<int>([&](weft::scope<int>& s) -> weft::task<int> {
        for (int i = 0; i < 100; ++i) s.spawn(square(i));
        for (int i = 0; i < 100; ++i)
          s.spawn([](std::atomic<int>& n, tracker t) -> weft::task<int> {
            co_await bump(n, std::move(t));
            co_return 0;
          }(ran, tracker{live}));
        const auto first = co_await s.next();  // the rest is left to with_scope
        co_return first ? 1 : 0;
      });
      co_return std::pair{from_body, ran.load()};
    }());
    CHECK(r.first == 1);
    CHECK(r.second == 100);  // not stopped: every child ran to its end
    CHECK(live.load() == 0);
  }

  SECTION("a child's exception is rethrown after every child has ended (rethrow_first)") {
    std::atomic<int> ran{0};
    std::atomic<int> live{0};
    auto r = weft::sync_wait(pool, [&]() -> weft::task<int> {
      try {
        co_await weft::with_scope([&](weft::scope<>& s) -> weft::task<void> {
          s.spawn(fails(0));
          for (int i = 0; i < 50; ++i) s.spawn(bump(ran, tracker{live}));
          co_return;
        });
      } catch (const std::runtime_error&) {
        co_return ran.load();
      }
      co_return -1;
    }());
    CHECK(r == 50);
  }

  SECTION("the scope is stopped when the task awaiting with_scope is") {
    std::atomic<int> ended{0};
    weft::latch spawned{1};
    // A named lambda: the child's frame refers to its captures until it ends.
    auto child = [&]() -> weft::task<void> {
      co_await weft::with_scope([&](weft::scope<>& s) -> weft::task<void> {
        for (int i = 0; i < 10; ++i) s.spawn(wait_for_stop(ended));
        spawned.count_down();
        co_return;
      });
    };
    weft::sync_wait(pool, [&]() -> weft::task<void> {
      weft::scope<> outer;
      outer.spawn(child());
      co_await spawned.wait();
      outer.request_stop();
      co_await outer.join();
    }());
    CHECK(ended.load() == 10);
  }

  SECTION("options: policy collect keeps the children's exceptions for the body") {
    auto n = weft::sync_wait(pool, []() -> weft::task<std::size_t> {
      co_return co_await weft::with_scope<>(
          [](weft::scope<>& s) -> weft::task<std::size_t> {
            for (int i = 0; i < 10; ++i) s.spawn(fails(i));
            co_await s.join();
            co_return s.take_errors().size();
          },
          {.policy = weft::scope_policy::collect});
    }());
    CHECK(n == 10);
  }
}

TEMPLATE_LIST_TEST_CASE("scope: keep_values false drops each value as its child ends", "[scope]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  std::atomic<int> live{0};
  auto r = weft::sync_wait(pool, [&]() -> weft::task<std::pair<int, bool>> {
    weft::scope<tracked_value> s{{.keep_values = false}};
    for (int i = 0; i < 1000; ++i) s.spawn(make_tracked(live, i));
    const auto v = co_await s.next();  // nothing kept: only the end is reported
    const int live_at_end = live.load();
    co_await s.join();
    co_return std::pair{live_at_end, v.has_value()};
  }());
  CHECK(r.first == 0);
  CHECK_FALSE(r.second);
  CHECK(live.load() == 0);
}
