// weft/pool.hpp: construction, options, ownership of threads, default pool, shutdown.
#include <weft/pool.hpp>

#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using weft_test::tracker;

weft::task<void> noop() { co_return; }

weft::task<bool> runs_on(weft::thread_pool& pool) { co_return pool.owns_current_thread(); }

weft::task<std::uint64_t> fib(unsigned n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  auto b = co_await fib(n - 2);
  co_return co_await a + b;
}

// A posted task that forks a child before it finishes: both must run at shutdown.
weft::task<void> count_and_fork(std::atomic<std::size_t>& n, tracker t) {
  weft::spawn(weft_test::count_run(n, t)).detach();
  n.fetch_add(1, std::memory_order_relaxed);
  co_return;
}

// A serial chain: each link is forked and joined at once. The links run one after the
// other (each join orders them), so the trace needs no synchronisation.
struct chain_trace {
  std::thread::id last;
  std::size_t links = 0;
  std::size_t moves = 0;  // links that ran on another thread than the link before
};

weft::task<void> chain_link(chain_trace& tr) {
  const auto id = std::this_thread::get_id();
  if (tr.links++ != 0 && id != tr.last) ++tr.moves;
  tr.last = id;
  co_return;
}

weft::task<void> serial_chain(std::size_t n, chain_trace& tr) {
  for (std::size_t i = 0; i < n; ++i) {
    auto next = weft::spawn(chain_link(tr)).fork();
    co_await next;
  }
}

weft::task<std::thread::id> note_thread(std::atomic<bool>& ran) {
  ran.store(true, std::memory_order_release);
  co_return std::this_thread::get_id();
}

// Forks one child, then computes (spins) with no scheduling point until the child has
// run: only another worker can run it meanwhile. Returns whether that happened.
weft::task<bool> fork_then_compute() {
  std::atomic<bool> ran{false};
  auto child = weft::spawn(note_thread(ran)).fork();
  const bool ran_meanwhile = weft_test::eventually([&] { return ran.load(std::memory_order_acquire); });
  const std::thread::id parent_thread = std::this_thread::get_id();  // the join may resume us elsewhere
  const std::thread::id child_thread = co_await child;
  co_return ran_meanwhile&& child_thread != parent_thread;
}

}  // namespace

TEST_CASE("thread_pool: invalid options throw std::invalid_argument", "[pool]") {
  CHECK_THROWS_AS(weft::thread_pool({.threads = 0}), std::invalid_argument);
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .priorities = 0}), std::invalid_argument);
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .priorities = 17}), std::invalid_argument);
  // An outside test's case: UINT_MAX steal rounds made the destructor spin for minutes.
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .spins = 65'537}), std::invalid_argument);
  CHECK_THROWS_AS(weft::thread_pool({.threads = 1, .spins = ~0u}), std::invalid_argument);
  weft::thread_pool most{{.threads = 2, .spins = 65'536}};  // the bound itself is fine
  CHECK(weft::sync_wait(most, fib(10)) == 55);
}

TEST_CASE("thread_pool: reports its options", "[pool]") {
  SECTION("explicit") {
    weft::thread_pool pool{{.threads = 3, .priorities = 16}};
    CHECK(pool.thread_count() == 3);
    CHECK(pool.priorities() == 16);
  }
  SECTION("one priority level") {
    weft::thread_pool pool{{.threads = 1, .priorities = 1}};
    CHECK(pool.priorities() == 1);
    CHECK(weft::sync_wait(pool, fib(10)) == 55);
  }
  SECTION("defaults") {
    CHECK(weft::default_thread_count() >= 1);
    weft::thread_pool pool;
    CHECK(pool.thread_count() == weft::default_thread_count());
    CHECK(pool.priorities() == 4);
  }
}

TEMPLATE_LIST_TEST_CASE("thread_pool: owns its workers and nothing else", "[pool]", weft_test::all_executors) {
  auto pool = TestType::make();
  weft::thread_pool other{{.threads = 1}};
  CHECK(pool.thread_count() == TestType::k_threads);
  CHECK_FALSE(pool.owns_current_thread());
  CHECK(weft::sync_wait(pool, runs_on(pool)));
  CHECK_FALSE(weft::sync_wait(other, runs_on(pool)));
  CHECK_FALSE(weft::sync_wait(pool, runs_on(other)));
}

TEST_CASE("thread_pool: options that change scheduling keep results right", "[pool]") {
  SECTION("pinned workers") {
    weft::thread_pool pool{{.threads = 2, .pin = true}};
    CHECK(weft::sync_wait(pool, fib(20)) == 6765);
  }
  SECTION("no spinning: park at once") {
    weft::thread_pool pool{{.threads = 2, .spins = 0}};
    CHECK(weft::sync_wait(pool, fib(20)) == 6765);
  }
  SECTION("many priority levels") {
    weft::thread_pool pool{{.threads = 2, .priorities = 16}};
    CHECK(weft::sync_wait(pool, fib(20), 15) == 6765);
  }
}

TEST_CASE("default_pool: one process-wide pool with default options", "[pool]") {
  weft::thread_pool& a = weft::default_pool();
  weft::thread_pool& b = weft::default_pool();
  CHECK(&a == &b);
  CHECK(a.thread_count() == weft::default_thread_count());
  CHECK(weft::sync_wait(a, runs_on(a)));
  CHECK(weft::sync_wait(a, fib(15)) == 610);
}

TEMPLATE_LIST_TEST_CASE("thread_pool: destruction runs all queued work and what it spawns", "[pool]",
                        weft_test::all_executors) {
  constexpr std::size_t k_posts = 2'000;
  std::atomic<std::size_t> ran{0};
  std::atomic<int> live{0};
  {
    auto pool = TestType::make();
    for (std::size_t i = 0; i < k_posts; ++i)
      weft::post(pool, count_and_fork(ran, tracker{live}), static_cast<unsigned>(i % pool.priorities()));
  }
  CHECK(ran == 2 * k_posts);
  CHECK(live == 0);
}

TEST_CASE("thread_pool: a pool shutting down refuses posts from outside and still runs what it accepted", "[pool]") {
  weft_test::pool_in_shutdown p;
  CHECK_THROWS_AS(weft::post(p.pool(), noop()), weft::shutdown_error);
  const std::size_t accepted = p.probes_accepted();
  p.finish();
  CHECK(p.probes_ran() == accepted);
  CHECK(p.probes_alive() == 0);
}

TEST_CASE("thread_pool: a serial chain of forks and joins stays on one thread", "[pool][scheduling]") {
  // Each link is the parent's only queued work and is joined at once: an idle worker
  // that stole it would only make the chain ping-pong between threads (latency (c)).
  weft::thread_pool pool(weft::pool_options{.threads = 2});
  constexpr std::size_t k_links = 20'000;
  chain_trace tr;
  weft::sync_wait(pool, serial_chain(k_links, tr));
  REQUIRE(tr.links == k_links);
  INFO("links that changed thread: " << tr.moves);
  CHECK(tr.moves <= k_links / 100);  // a few, when the OS preempts the chain's thread
}

namespace {

// The ids of this process's threads (Linux: /proc/self/task).
std::set<std::string> thread_ids() {
  std::set<std::string> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ids.insert(e.path().filename().string());
  return ids;
}

// True when thread `tid` of this process sleeps in the kernel (state S): an idle worker
// parked, or pausing between its steal rounds.
bool asleep(const std::string& tid) {
  std::ifstream in("/proc/self/task/" + tid + "/stat");
  const std::string stat{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto name_end = stat.rfind(')');  // the state follows the command name: "pid (comm) S ..."
  return name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'S';
}

}  // namespace

TEST_CASE("thread_pool: a lone forked child is stolen while its parent computes", "[pool][scheduling]") {
  // The other side of the rule above: a child that is not joined at once still runs
  // in parallel (taken by the idle worker after a short patience).
  // With more workers than two, each park raises only the requests answered since the
  // previous one (idle.cpp): every round must still get the child stolen.
  for (const std::size_t threads : {2, 4, 8}) {
    const std::set<std::string> before = thread_ids();
    weft::thread_pool pool(weft::pool_options{.threads = threads});
    std::vector<std::string> workers;
    std::ranges::set_difference(thread_ids(), before, std::back_inserter(workers));
    REQUIRE(workers.size() == threads);
    for (int round = 0; round < 5; ++round) {
      // Precondition: every worker idle, asleep in its search or parked, so that one left
      // idle by the parent must be woken and ask the busy one to share.
      REQUIRE(weft_test::eventually([&] { return std::ranges::all_of(workers, asleep); }));
      INFO(threads << " workers, round " << round);
      CHECK(weft::sync_wait(pool, fork_then_compute()));
    }
  }
}

namespace {
// A child that computes for `ms` without a scheduling point and notes its thread.
weft::task<void> compute_on(std::mutex& m, std::set<std::thread::id>& seen, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  {
    std::lock_guard lock(m);
    seen.insert(std::this_thread::get_id());
  }
  while (std::chrono::steady_clock::now() < until) {
  }
  co_return;
}

weft::task<void> fork_many(std::mutex& m, std::set<std::thread::id>& seen, int n, int ms) {
  std::vector<weft::fork_handle<void>> children;
  for (int i = 0; i < n; ++i) children.push_back(weft::spawn(compute_on(m, seen, ms)).fork());
  for (auto& c : children) co_await c;
}
}  // namespace

TEST_CASE("thread_pool: forked work spreads over every worker, parked ones included", "[pool][scheduling]") {
  // Every worker parks first; then one task forks 400 children of 1 ms. The idle
  // workers must be asked, woken and find the work (share requests, the work bitmap
  // the thieves read), so each runs some.
  for (const std::size_t threads : {2, 4}) {
    weft::thread_pool pool(weft::pool_options{.threads = threads});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let them park
    std::mutex m;
    std::set<std::thread::id> seen;
    weft::sync_wait(pool, fork_many(m, seen, 400, 1));
    INFO(threads << " workers");
    CHECK(seen.size() == threads);
  }
}

namespace {
weft::task<void> throws_detached(int i) {
  throw std::runtime_error("detached " + std::to_string(i));
  co_return;
}
}  // namespace

TEST_CASE("thread_pool: on_unhandled_exception receives detached tasks' exceptions", "[pool]") {
  std::atomic<int> seen{0};
  std::atomic<int> on_worker{0};
  std::atomic<int> right_message{0};
  weft::thread_pool* self = nullptr;
  {
    weft::thread_pool pool{{.threads = 2, .on_unhandled_exception = [&](std::exception_ptr e) {
                              seen.fetch_add(1, std::memory_order_relaxed);
                              if (self != nullptr && self->owns_current_thread())
                                on_worker.fetch_add(1, std::memory_order_relaxed);
                              try {
                                std::rethrow_exception(e);
                              } catch (const std::runtime_error& ex) {
                                if (std::string(ex.what()).rfind("detached ", 0) == 0)
                                  right_message.fetch_add(1, std::memory_order_relaxed);
                              }
                            }}};
    self = &pool;
    weft::sync_wait(pool, []() -> weft::task<void> {
      for (int i = 0; i < 50; ++i) weft::spawn(throws_detached(i)).detach();
      {
        auto abandoned = weft::spawn(throws_detached(50)).fork();
      }  // dropped: detached too
      co_return;
    }());
    REQUIRE(weft_test::eventually([&] { return seen.load() == 51; }));
  }  // the pool is gone: nothing more may come
  CHECK(seen.load() == 51);
  CHECK(on_worker.load() == 51);
  CHECK(right_message.load() == 51);
}

TEST_CASE("thread_pool: on_thread_start and on_thread_stop run once on each worker", "[pool]") {
  constexpr std::size_t k_threads = 4;
  std::atomic<unsigned> started_mask{0};
  std::atomic<unsigned> stopped_mask{0};
  std::atomic<int> started_before_work{0};
  {
    weft::thread_pool pool{
        {.threads = k_threads,
         .on_thread_start =
             [&](std::size_t i) {
               started_mask.fetch_or(1u << i, std::memory_order_relaxed);
               if (weft::current_executor() != nullptr)  // the worker's state is set
                 started_before_work.fetch_add(1, std::memory_order_relaxed);
             },
         .on_thread_stop = [&](std::size_t i) { stopped_mask.fetch_or(1u << i, std::memory_order_relaxed); }}};
    // Every worker started (each runs its start hook before looking for work).
    REQUIRE(weft_test::eventually([&] { return started_mask.load() == (1u << k_threads) - 1; }));
    CHECK(weft::sync_wait(pool, runs_on(pool)));
    CHECK(stopped_mask.load() == 0);
  }
  CHECK(started_before_work.load() == static_cast<int>(k_threads));
  CHECK(stopped_mask.load() == (1u << k_threads) - 1);
}
