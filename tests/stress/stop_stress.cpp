// The stop protocol of weft/detail/waiter.hpp under races: in every round a task waits
// on a primitive under a fresh token while, at the same moment, the primitive serves
// it (the driver task) and a plain thread stops the token. Each wait must either
// complete or report the stop, never both, never neither, and the primitive must end
// the round as if a stopped wait had never been there: the element, permit, signal or
// lock it did not take is still there. Run under ThreadSanitizer.
#include <weft/channel.hpp>
#include <weft/event.hpp>
#include <weft/mutex.hpp>
#include <weft/pool.hpp>
#include <weft/scope.hpp>
#include <weft/semaphore.hpp>
#include <weft/spawn.hpp>
#include <weft/stop.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "sync.hpp"

#include <weft/detail/spin_lock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>

namespace {

// Per primitive: 100,000 races in all in a plain build on an idle machine (about 11 s).
// Each round hands work between four threads several times; on an oversubscribed
// machine (ctest -j, other load) every hand-over may wait for a time slice, so a
// primitive stops after k_budget with the rounds done so far, at least k_min_rounds.
const int k_rounds = weft_test::rounds(20'000, 2'000);
const int k_min_rounds = weft_test::rounds(1'000, 200);
constexpr auto k_budget = std::chrono::seconds(6);

// The plain thread that does one side of round r's race (the stop, or the serve) once
// the driver says go; the driver does the other.
class helper {
 public:
  helper()
      : m_thread([this] {
          for (int r = 1;; ++r) {
            int g;
            // Sleeps (a futex): polling would starve the other threads when the machine
            // is oversubscribed (ctest -j); the driver's adaptive head start makes up for
            // the wake-up's latency.
            while ((g = m_go.load(std::memory_order_acquire)) >= 0 && g < r) m_go.wait(g, std::memory_order_acquire);
            if (g < 0) return;  // the destructor
            m_action();
            m_done.store(r, std::memory_order_release);
            m_done.notify_one();
          }
        }) {}
  ~helper() {
    m_go.store(-1, std::memory_order_release);
    m_go.notify_one();
    m_thread.join();
  }
  /// Round r (from 1): run `action` now, on the helper's thread.
  void go(int r, std::function<void()> action) {
    m_action = std::move(action);  // published by the release store below
    m_go.store(r, std::memory_order_release);
    m_go.notify_one();
  }
  /// Waits until round r's action ran.
  void wait_done(int r) {
    int d;
    while ((d = m_done.load(std::memory_order_acquire)) < r) m_done.wait(d, std::memory_order_acquire);
  }

 private:
  std::function<void()> m_action;
  std::atomic<int> m_go{0};
  std::atomic<int> m_done{0};
  std::thread m_thread;  // last: starts after the members it reads
};

struct tally {
  int completed = 0;
  int stopped = 0;
  int broken = 0;  // a round whose invariant failed
  int spin = 0;    // the driver's head start for the helper, adapted round by round
  int rounds = 0;  // rounds run
};

// Set by a round's waiting task just before it waits.
std::atomic<bool> g_ready{false};
void mark_ready() noexcept {
  g_ready.store(true, std::memory_order_release);
  g_ready.notify_one();
}

weft::task<bool> pull_one(weft::channel<int>& ch, int expect) {
  mark_ready();
  const std::optional<int> v = co_await ch.pull();
  if (v && *v != expect) throw std::logic_error("pulled the wrong element");
  co_return v.has_value();
}

weft::task<bool> push_one(weft::channel<int>& ch, int v) {
  mark_ready();
  co_return co_await ch.push(v);
}

weft::task<bool> lock_one(weft::mutex& m, int& guarded) {
  try {
    mark_ready();
    auto g = co_await m.lock();
    ++guarded;  // plain memory: TSan checks the hand-over
    co_return true;
  } catch (const weft::cancelled&) {
    co_return false;
  }
}

weft::task<bool> acquire_one(weft::semaphore& s) {
  try {
    mark_ready();
    co_await s.acquire();
    co_return true;
  } catch (const weft::cancelled&) {
    co_return false;
  }
}

weft::task<bool> wait_one(weft::auto_reset_event& e) {
  try {
    mark_ready();
    co_await e.wait();
    co_return true;
  } catch (const weft::cancelled&) {
    co_return false;
  }
}

// One round: starts make() (a task<bool>: true = completed) under a fresh token; once it
// is about to wait, serves it with serve() and stops the token at the same time, one on
// the helper's thread and the other here after a spin. The sides swap every round, and
// the spin adapts to how long the helper takes to start (it grows while the driver's
// side comes first and shrinks otherwise), so that either side comes first about as
// often, and the wait may be queued or still on its way. Then checks check(completed).
template <class Make, class Serve, class Check>
weft::task<void> race_round(weft::executor& waiters, int r, helper& st, tally& t, Make make, Serve serve, Check check) {
  std::stop_source src;
  std::optional<bool> completed;
  {
    weft::scope<bool> s{src.get_token()};
    g_ready.store(false, std::memory_order_relaxed);
    s.spawn(weft::spawn(make()).run_on(waiters));  // the driver spins below: not on its thread
    g_ready.wait(false, std::memory_order_acquire);
    const auto stop = [&src] { src.request_stop(); };
    if (r % 2 == 0)
      st.go(r, stop);
    else
      st.go(r, serve);
    for (int i = t.spin; i > 0; --i) weft::detail::cpu_relax();
    if (r % 2 == 0)
      serve();
    else
      stop();
    completed = co_await s.next();
    co_await s.join();
  }
  st.wait_done(r);
  if (!completed) {
    ++t.broken;
  } else {
    ++(*completed ? t.completed : t.stopped);
    if (!check(*completed)) ++t.broken;
    const bool driver_first = (r % 2 == 0) == *completed;  // even rounds: the driver serves
    // Grows while the driver's side comes first, up to a bound (an oversubscribed
    // machine's wake-ups take a time slice: rounds would get long).
    t.spin = driver_first ? std::min(t.spin + 16, 100'000) : (t.spin > 16 ? t.spin - 16 : 0);
  }
}

// Runs body(waiters, r, stopper, tally) for every round on a driver pool; the waiting
// tasks run on a pool of their own.
template <class Body>
tally run_rounds(Body body) {
  weft::thread_pool driver{{.threads = 1}};
  weft::thread_pool waiters{{.threads = 1}};
  helper st;
  tally t;
  weft::sync_wait(driver, [](weft::executor& w, helper& s, tally& tl, Body b) -> weft::task<void> {
    const auto end = std::chrono::steady_clock::now() + k_budget;
    for (int r = 1; r <= k_rounds && (r <= k_min_rounds || std::chrono::steady_clock::now() < end); ++r) {
      co_await b(w, r, s, tl);
      tl.rounds = r;
    }
  }(waiters, st, t, body));
  return t;
}

void report(const char* what, const tally& t) {
  CHECK(t.broken == 0);
  CHECK(t.rounds >= k_min_rounds);
  CHECK(t.completed + t.stopped == t.rounds);
  WARN(what << ": " << t.completed << " completed, " << t.stopped << " stopped of " << t.rounds << " (head start "
            << t.spin << " pauses at the end)");
}

}  // namespace

TEST_CASE("stop stress: a channel pull races a push and a stop", "[stop][channel][stress]") {
  weft::channel<int> ch;
  const tally t = run_rounds([&](weft::executor& w, int r, helper& st, tally& tl) {
    return race_round(
        w, r, st, tl, [&, r] { return pull_one(ch, r); }, [&, r] { (void)ch.try_push(r); },
        [&, r](bool got) {
          // Pulled: nothing left. Stopped: the element is still there, exactly once.
          int v = -1;
          const weft::channel_status s = ch.try_pull(v);
          return got ? s == weft::channel_status::empty : (s == weft::channel_status::ok && v == r);
        });
  });
  report("pull", t);
}

TEST_CASE("stop stress: a push to a full channel races a pull and a stop", "[stop][channel][stress]") {
  weft::channel<int> ch{1};
  const tally t = run_rounds([&](weft::executor& w, int r, helper& st, tally& tl) {
    return race_round(
        w, r, st, tl,
        [&, r] {
          (void)ch.try_push(-r);  // fill it: the push below has to wait
          return push_one(ch, r);
        },
        [&] {
          int v = 0;
          (void)ch.try_pull(v);  // frees the place (takes -r)
        },
        [&, r](bool pushed) {
          // Pushed: r is the one element left. Stopped: r is nowhere.
          int v = 0;
          const weft::channel_status s = ch.try_pull(v);
          const bool ok = pushed ? (s == weft::channel_status::ok && v == r) : s == weft::channel_status::empty;
          return ok && ch.try_pull(v) == weft::channel_status::empty;
        });
  });
  report("push", t);
}

TEST_CASE("stop stress: a lock races an unlock and a stop", "[stop][mutex][stress]") {
  weft::mutex m;
  int guarded = 0;
  const tally t = run_rounds([&](weft::executor& w, int r, helper& st, tally& tl) {
    const int before = guarded;
    return race_round(
        w, r, st, tl,
        [&] {
          // Held by the driver: the lock below has to wait.
          if (!m.try_lock()) throw std::logic_error("the mutex was not free at the start of a round");
          return lock_one(m, guarded);
        },
        [&] { m.unlock(); },
        [&, before](bool locked) {
          // Either way the mutex is free afterwards (no stopped waiter owns it), and the
          // guarded count moved only for a lock that completed.
          const bool free = m.try_lock();
          if (free) m.unlock();
          return free && guarded == before + (locked ? 1 : 0);
        });
  });
  report("lock", t);
}

TEST_CASE("stop stress: an acquire races a release and a stop", "[stop][semaphore][stress]") {
  weft::semaphore sem{0};
  const tally t = run_rounds([&](weft::executor& w, int r, helper& st, tally& tl) {
    return race_round(
        w, r, st, tl, [&] { return acquire_one(sem); }, [&] { sem.release(); },
        [&](bool acquired) {
          // The permit went to the waiter or is still counted, never both or neither.
          const bool left = sem.try_acquire();
          return acquired ? !left : left;
        });
  });
  report("acquire", t);
}

TEST_CASE("stop stress: an auto_reset_event wait races a set and a stop", "[stop][event][stress]") {
  weft::auto_reset_event ev;
  const tally t = run_rounds([&](weft::executor& w, int r, helper& st, tally& tl) {
    return race_round(
        w, r, st, tl, [&] { return wait_one(ev); }, [&] { ev.set(); },
        [&](bool woke) {
          const bool left = ev.try_wait();
          return woke ? !left : left;
        });
  });
  report("event", t);
}
