// weft/fiber.hpp: spawn_fiber results and exceptions, weft::await of each awaitable
// kind, priorities, migration, misuse, and the guard page.
#include <weft/fiber.hpp>

#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/resume_on.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

/// Waits from a plain thread for a fiber's result (through a task awaiting its handle).
template <class T>
weft::task<T> await_handle(weft::fiber_handle<T> h) {
  co_return co_await h;
}
template <class T>
T join(weft::executor& ex, weft::fiber_handle<T> h) {
  return weft::sync_wait(ex, await_handle(std::move(h)));
}

weft::task<int> square(int x) { co_return x* x; }
weft::task<int> throws_logic() {
  throw std::logic_error("task failed");
  co_return 0;
}

/// Awaitable with a bool await_suspend that declines to suspend, and a value.
struct declining_awaitable {
  int value;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<>) const noexcept { return false; }
  int await_resume() const noexcept { return value; }
};

/// A plain thread (outside every executor) that resumes one coroutine handed to it.
class resumer_thread {
 public:
  resumer_thread()
      : m_thread([this] {
          void* h = nullptr;
          while ((h = m_handle.load(std::memory_order_acquire)) == nullptr) m_handle.wait(nullptr);
          std::coroutine_handle<>::from_address(h).resume();
        }) {}
  ~resumer_thread() { m_thread.join(); }
  void hand(std::coroutine_handle<> h) noexcept {
    m_handle.store(h.address(), std::memory_order_release);  // pairs with the acquire above
    m_handle.notify_one();
  }

 private:
  std::atomic<void*> m_handle{nullptr};
  std::thread m_thread;
};

/// Awaitable resumed by a resumer_thread.
struct resumed_by_thread {
  resumer_thread* m_resumer;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { m_resumer->hand(h); }  // `this` may be gone after
  std::string await_resume() const { return "from thread"; }
};

/// Awaitable whose await_suspend throws.
struct refusing_awaitable {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const { throw std::runtime_error("refused"); }
  void await_resume() const noexcept {}
};

/// Awaitable through a free operator co_await.
struct via_free_operator {
  int value;
};
declining_awaitable operator co_await(via_free_operator v) noexcept { return {v.value}; }

}  // namespace

TEMPLATE_LIST_TEST_CASE("a task co_awaits a fiber's value", "[fiber]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  REQUIRE(join(pool, weft::spawn_fiber([] { return 41 + 1; }, {.executor = &pool})) == 42);
  std::string s = join(pool, weft::spawn_fiber([] { return std::string(100, 'x'); }, {.executor = &pool}));
  REQUIRE(s == std::string(100, 'x'));
  int target = 0;
  int& ref = join(pool, weft::spawn_fiber([&]() -> int& { return target; }, {.executor = &pool}));
  REQUIRE(&ref == &target);
  std::atomic<int> ran{0};
  join(pool, weft::spawn_fiber([&] { ran.fetch_add(1); }, {.executor = &pool}));
  REQUIRE(ran.load() == 1);
}

TEMPLATE_LIST_TEST_CASE("a fiber awaits tasks, forks, spawns and fibers", "[fiber]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  auto h = weft::spawn_fiber(
      [] {
        std::int64_t sum = weft::await(square(3));    // a task, inline
        auto forked = weft::spawn(square(4)).fork();  // a forked task
        sum += weft::await(square(5));
        sum += weft::await(forked);
        sum += weft::await(weft::spawn(square(6)));  // spawn_op
        auto inner = weft::spawn_fiber([] { return weft::await(square(7)) + 1; });
        sum += weft::await(std::move(inner));  // another fiber
        return sum;
      },
      {.executor = &pool});
  REQUIRE(join(pool, std::move(h)) == 9 + 16 + 25 + 36 + 50);
}

TEST_CASE("a fiber awaits plain awaitables of every await_suspend shape", "[fiber]") {
  weft::thread_pool pool{{.threads = 2}};
  weft::thread_pool other{{.threads = 1}};
  resumer_thread resumer;
  struct seen {
    int declined = 0, free_op = 0;
    std::string from_thread;
    bool on_other = false, back_home = false, in_fiber = false;
  };
  auto h = weft::spawn_fiber(
      [&] {
        seen s;
        s.in_fiber = weft::in_fiber();
        s.declined = weft::await(declining_awaitable{7});
        s.free_op = weft::await(via_free_operator{8});
        s.from_thread = weft::await(resumed_by_thread{&resumer});
        weft::await(weft::resume_on(other));
        s.on_other = other.owns_current_thread() && weft::current_executor() == &other;
        weft::await(weft::resume_on(pool));
        s.back_home = pool.owns_current_thread() && weft::current_executor() == &pool;
        return s;
      },
      {.executor = &pool});
  seen s = join(pool, std::move(h));
  CHECK(s.in_fiber);
  CHECK(s.declined == 7);
  CHECK(s.free_op == 8);
  CHECK(s.from_thread == "from thread");
  CHECK(s.on_other);
  CHECK(s.back_home);
  CHECK_FALSE(weft::in_fiber());
}

TEMPLATE_LIST_TEST_CASE("exceptions cross fibers both ways", "[fiber]", weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  // The fiber's exception reaches the task awaiting it.
  auto failing = weft::spawn_fiber([]() -> int { throw std::runtime_error("fiber failed"); }, {.executor = &pool});
  REQUIRE_THROWS_WITH(join(pool, std::move(failing)), "fiber failed");
  // An awaited task's exception, and a throwing await_suspend, reach the fiber.
  auto h = weft::spawn_fiber(
      [] {
        int caught = 0;
        try {
          weft::await(throws_logic());
        } catch (const std::logic_error& e) {
          caught += std::string(e.what()) == "task failed" ? 1 : 0;
        }
        try {
          auto f = weft::spawn(throws_logic()).fork();
          weft::await(f);
        } catch (const std::logic_error&) {
          ++caught;
        }
        try {
          weft::await(refusing_awaitable{});
        } catch (const std::runtime_error& e) {
          caught += std::string(e.what()) == "refused" ? 1 : 0;
        }
        return caught;
      },
      {.executor = &pool});
  REQUIRE(join(pool, std::move(h)) == 3);
}

TEST_CASE("a fiber awaiting inside a catch block keeps its exception across threads", "[fiber]") {
  weft::thread_pool a{{.threads = 1}};
  weft::thread_pool b{{.threads = 1}};
  auto h = weft::spawn_fiber(
      [&] {
        int ok = 0;
        try {
          try {
            throw std::runtime_error("outer");
          } catch (const std::runtime_error&) {
            for (int i = 0; i < 4; ++i) weft::await(weft::resume_on(i % 2 == 0 ? b : a));  // hop threads
            ok += std::uncaught_exceptions() == 0 ? 1 : 0;
            try {
              std::rethrow_exception(std::current_exception());
            } catch (const std::runtime_error& again) {
              ok += std::string(again.what()) == "outer" ? 1 : 0;
            }
            throw;  // the exception being handled, still ours after the hops
          }
        } catch (const std::runtime_error& e) {
          ok += std::string(e.what()) == "outer" ? 1 : 0;
        }
        return ok;
      },
      {.executor = &a});
  // Meanwhile the pools' threads handle exceptions of their own.
  for (int i = 0; i < 20; ++i) REQUIRE_THROWS(weft::sync_wait(b, throws_logic()));
  REQUIRE(join(a, std::move(h)) == 3);
}

TEST_CASE("weft::await outside a fiber is a clear error", "[fiber]") {
  REQUIRE_FALSE(weft::in_fiber());
  REQUIRE_THROWS_AS(weft::await(square(2)), std::logic_error);
  REQUIRE_THROWS_WITH(weft::await(declining_awaitable{1}), Catch::Contains("outside a fiber"));
  weft::thread_pool pool{{.threads = 1}};
  auto from_task = []() -> weft::task<bool> {
    try {
      (void)weft::await(square(2));
    } catch (const std::logic_error&) {
      co_return true;
    }
    co_return false;
  };
  REQUIRE(weft::sync_wait(pool, from_task()));
}

TEST_CASE("spawn_fiber rejects bad options and empty handles", "[fiber]") {
  weft::thread_pool pool{{.threads = 1, .priorities = 2}};
  auto nop = [] {};
  REQUIRE_THROWS_AS(weft::spawn_fiber(nop, {.executor = &pool, .priority = 2}), std::out_of_range);
  REQUIRE_THROWS_AS(weft::spawn_fiber(nop, {.executor = &pool, .stack_size = 1024}), std::invalid_argument);
  REQUIRE_THROWS_AS(weft::spawn_fiber(nop, {.executor = &pool, .stack_size = std::size_t{1} << 31}),
                    std::invalid_argument);
  weft::fiber_handle<int> empty;
  REQUIRE_FALSE(empty.valid());
  REQUIRE_THROWS_AS(join(pool, std::move(empty)), std::logic_error);
}

TEST_CASE("fibers run at their priority and inherit the spawner's", "[fiber]") {
  weft::thread_pool pool{{.threads = 1, .priorities = 3}};
  weft_test::gate started, release;
  weft::post(pool, weft_test::hold_worker(started, release));
  started.wait();  // the only worker is busy: everything below queues up
  std::mutex m;
  std::vector<unsigned> order;
  std::vector<weft::fiber_handle<unsigned>> hs;
  for (unsigned p : {2u, 1u, 0u, 2u, 0u}) {
    hs.push_back(weft::spawn_fiber(
        [&, p] {
          std::lock_guard lock(m);
          order.push_back(p);
          return weft::current_priority();
        },
        {.executor = &pool, .priority = p}));
  }
  release.open();
  std::vector<unsigned> prios;
  for (auto& h : hs) prios.push_back(join(pool, std::move(h)));
  REQUIRE(prios == std::vector<unsigned>{2, 1, 0, 2, 0});
  REQUIRE(order == std::vector<unsigned>{0, 0, 1, 2, 2});
  // Default priority: the spawning task's own.
  auto spawner = []() -> weft::task<unsigned> {
    co_return co_await weft::spawn_fiber([] { return weft::current_priority(); });
  };
  REQUIRE(weft::sync_wait(pool, spawner(), 2) == 2);
}

TEST_CASE("a dropped fiber handle is fire-and-forget", "[fiber]") {
  weft::thread_pool pool{{.threads = 2}};
  std::atomic<int> done{0};
  weft_test::gate all_done;
  constexpr int k_fibers = 100;
  for (int i = 0; i < k_fibers; ++i) {
    weft::spawn_fiber(
        [&] {
          weft::await(weft::resume_on(pool));
          if (done.fetch_add(1) + 1 == k_fibers) all_done.open();
        },
        {.executor = &pool})
        .detach();
  }
  // And one whose exception is reported, not lost in a crash.
  {
    auto dropped = weft::spawn_fiber([]() -> int { throw std::runtime_error("nobody listens"); }, {.executor = &pool});
  }
  all_done.wait();
  REQUIRE(done.load() == k_fibers);
}

TEST_CASE("spawn_fiber without an executor uses the caller's, else the default pool", "[fiber]") {
  weft::thread_pool pool{{.threads = 1}};
  auto on_pool = []() -> weft::task<bool> {
    co_return co_await weft::spawn_fiber([] { return weft::current_executor(); }) == weft::current_executor();
  };
  REQUIRE(weft::sync_wait(pool, on_pool()));
  REQUIRE(join(weft::default_pool(), weft::spawn_fiber([] { return weft::current_executor(); })) ==
          &weft::default_pool());
}

namespace {
__attribute__((noinline)) std::size_t recurse(std::size_t n) {
  volatile char frame[512];
  frame[0] = static_cast<char>(n);
  asm volatile("" ::: "memory");
  if (n == 0) return static_cast<std::size_t>(frame[0]);
  return recurse(n - 1) + static_cast<std::size_t>(frame[0]);
}
}  // namespace

namespace {
// Runs the fiber that spawn(pool) starts in a forked child process, on a fresh pool, and
// requires the child to die of SIGSEGV (a guard region hit, not silent corruption).
template <class Spawn>
void expect_sigsegv_in_child(Spawn spawn) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // Catch2's handler would report it as a failure
    ::alarm(30);                    // bounded even if something goes badly wrong
    weft::thread_pool p{{.threads = 1}};
    auto h = spawn(p);
    (void)join(p, std::move(h));
    ::_exit(0);  // not reached: the guard stops the recursion
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);
}
}  // namespace

TEST_CASE("a fiber's deep recursion within its stack works, overflow hits the guard page", "[fiber]") {
  weft::thread_pool pool{{.threads = 1}};
  // Well within a 1 MiB stack: ~100 frames of ~600 bytes.
  REQUIRE(join(pool, weft::spawn_fiber([] { return recurse(100); }, {.executor = &pool, .stack_size = 1 << 20})) ==
          recurse(100));
  if constexpr (WEFT_SANITIZED) {
    SUCCEED("the overflow check is skipped under sanitizers (they handle SIGSEGV themselves)");
    return;
  }
  // 64 KiB stack, ~10,000 frames of 512+ bytes: far past the end.
  expect_sigsegv_in_child(
      [](weft::thread_pool& p) { return weft::spawn_fiber([] { return recurse(10000); }, {.executor = &p}); });
}

namespace {
// 16 KiB a frame: four times the default one-page guard. The array's address escapes
// (the asm), so the compiler keeps all of it; only its lowest byte is touched.
__attribute__((noinline)) std::size_t recurse_big(std::size_t n) {
  volatile char frame[16 * 1024];
  frame[0] = static_cast<char>(n);
  asm volatile("" : : "r"(&frame[0]) : "memory");
  if (n == 0) return static_cast<std::size_t>(frame[0]);
  return recurse_big(n - 1) + static_cast<std::size_t>(frame[0]);
}
}  // namespace

TEST_CASE("fiber_options::guard_size: a guard larger than the biggest frame catches its overflow", "[fiber]") {
  weft::thread_pool pool{{.threads = 1}};
  CHECK_THROWS_AS(weft::spawn_fiber([] {}, {.executor = &pool, .guard_size = (std::size_t{64} << 20) + 1}),
                  std::invalid_argument);
  // Within the stack, a large guard changes nothing.
  REQUIRE(join(pool, weft::spawn_fiber([] { return recurse_big(3); },
                                       {.executor = &pool, .stack_size = 1 << 20, .guard_size = 256 * 1024})) ==
          recurse_big(3));
  if constexpr (WEFT_SANITIZED) {
    SUCCEED("the overflow check is skipped under sanitizers (they handle SIGSEGV themselves)");
    return;
  }
  // 64 KiB of stack, 16 KiB frames: the fifth lands in the 256 KiB guard, whose every
  // byte is inaccessible, wherever in it the frame's first access falls.
  expect_sigsegv_in_child([](weft::thread_pool& p) {
    return weft::spawn_fiber([] { return recurse_big(64); }, {.executor = &p, .guard_size = 256 * 1024});
  });
}
