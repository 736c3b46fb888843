// weft/resume_on.hpp: hopping executors, keeping the priority, a refusing executor.
#include <weft/resume_on.hpp>

#include <weft/pool.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "executors.hpp"
#include "sync.hpp"

#include <stdexcept>

namespace {

struct hops {
  bool started_on_a = false;
  bool moved_to_b = false;
  bool back_on_a = false;
};

weft::task<hops> hop(weft::executor& a, weft::executor& b) {
  hops h;
  h.started_on_a = a.owns_current_thread();
  co_await weft::resume_on(b);
  h.moved_to_b = b.owns_current_thread() && !a.owns_current_thread() && weft::current_executor() == &b;
  co_await weft::resume_on(a);
  h.back_on_a = a.owns_current_thread() && weft::current_executor() == &a;
  co_return h;
}

weft::task<unsigned> priority_after_hop(weft::thread_pool& to) {
  co_await weft::resume_on(to);
  co_return weft::current_priority();
}

weft::task<int> hop_to_self_many(weft::executor& pool, int n) {
  int still_here = 0;
  for (int i = 0; i < n; ++i) {
    co_await weft::resume_on(pool);
    still_here += pool.owns_current_thread() ? 1 : 0;
  }
  co_return still_here;
}

struct refused {
  bool threw = false;
  bool still_on_home = false;
};

weft::task<refused> hop_to_closing(weft::thread_pool& home, weft::thread_pool& closing) {
  refused r;
  try {
    co_await weft::resume_on(closing);
  } catch (const weft::shutdown_error&) {
    r.threw = true;
  }
  r.still_on_home = home.owns_current_thread();
  co_return r;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("resume_on: the task continues on the other executor, and back", "[resume_on]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(a);
  weft::thread_pool b{{.threads = 2}};
  for (int round = 0; round < 100; ++round) {
    auto h = weft::sync_wait(a, hop(a, b));
    REQUIRE(h.started_on_a);
    REQUIRE(h.moved_to_b);
    REQUIRE(h.back_on_a);
  }
}

TEMPLATE_LIST_TEST_CASE("resume_on: to the executor the task is on goes through its queue and stays", "[resume_on]",
                        weft_test::executor_kinds) {
  WEFT_TEST_EXECUTOR(pool);
  CHECK(weft::sync_wait(pool, hop_to_self_many(pool, 10'000)) == 10'000);
}

TEST_CASE("resume_on: keeps the priority, clamped to the target's levels", "[resume_on]") {
  weft::thread_pool a{{.threads = 1, .priorities = 4}};
  weft::thread_pool wide{{.threads = 1, .priorities = 4}};
  weft::thread_pool narrow{{.threads = 1, .priorities = 2}};
  CHECK(weft::sync_wait(a, priority_after_hop(wide), 2) == 2);
  CHECK(weft::sync_wait(a, priority_after_hop(wide), 3) == 3);
  CHECK(weft::sync_wait(a, priority_after_hop(narrow), 0) == 0);
  CHECK(weft::sync_wait(a, priority_after_hop(narrow), 3) == 1);
}

TEST_CASE("resume_on: an executor shutting down throws shutdown_error; the task stays where it was", "[resume_on]") {
  weft::thread_pool home{{.threads = 1}};
  weft_test::pool_in_shutdown closing;
  auto r = weft::sync_wait(home, hop_to_closing(home, closing.pool()));
  CHECK(r.threw);
  CHECK(r.still_on_home);
  closing.finish();
  CHECK(closing.probes_ran() == closing.probes_accepted());
}
