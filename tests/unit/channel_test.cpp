// weft/channel.hpp: non-blocking results, FIFO order, close, back-pressure, FIFO
// service of waiters, executors of woken tasks, plain threads, bulk operations.
#include <weft/channel.hpp>

#include <weft/fork_group.hpp>
#include <weft/pool.hpp>
#include <weft/post.hpp>
#include <weft/spawn.hpp>
#include <weft/sync_wait.hpp>

#include <catch2/catch.hpp>

#include "bounded_wait.hpp"
#include "executors.hpp"
#include "sync.hpp"

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using weft::channel_status;
using weft_test::eventually;

using weft_test::expect;
using weft_test::g_failures;

struct no_failures_at_exit {
  no_failures_at_exit() { g_failures.store(0); }
  ~no_failures_at_exit() { CHECK(g_failures.load() == 0); }
};

weft::task<void> produce(weft::channel<int>& ch, int first, int last) {
  for (int v = first; v < last; ++v) expect(co_await ch.push(v));
}

weft::task<std::vector<int>> consume_all(weft::channel<int>& ch) {
  std::vector<int> got;
  while (auto v = co_await ch.pull()) got.push_back(*v);
  co_return got;
}

// Pulls one element into `out` and raises `done`.
weft::task<void> pull_one(weft::channel<int>& ch, std::optional<int>& out, std::atomic<int>& done) {
  out = co_await ch.pull();
  done.fetch_add(1, std::memory_order_release);
}

// Pushes `v`, records the result and raises `done`.
weft::task<void> push_one(weft::channel<int>& ch, int v, std::atomic<int>& result, std::atomic<int>& done) {
  const bool ok = co_await ch.push(v);
  result.store(ok ? 1 : 0, std::memory_order_relaxed);
  done.fetch_add(1, std::memory_order_release);
}

// A minimal executor that is not a thread_pool: one thread running a FIFO of handles.
// It stands for any weft::executor (the Asio one of the I/O layer, say): channels use
// only the executor interface.
class thread_executor final : public weft::executor {
 public:
  thread_executor() : m_thread([this] { loop(); }) {}
  ~thread_executor() override {
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_cv.notify_one();
    m_thread.join();
  }
  void schedule(std::coroutine_handle<> h, unsigned prio) override {
    weft::check_priority(*this, prio, "thread_executor::schedule");
    {
      std::lock_guard lock(m_mutex);
      m_queue.push_back(h);
    }
    m_cv.notify_one();
  }
  unsigned priorities() const noexcept override { return 1; }
  bool owns_current_thread() const noexcept override { return std::this_thread::get_id() == m_thread.get_id(); }

 private:
  void loop() {
    weft::detail::t_executor = this;  // what current_executor() reports on this thread
    for (;;) {
      std::coroutine_handle<> h;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
        if (m_queue.empty()) break;
        h = m_queue.front();
        m_queue.pop_front();
      }
      h.resume();
    }
    weft::detail::t_executor = nullptr;
  }
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::coroutine_handle<>> m_queue;
  bool m_stop = false;
  std::thread m_thread;  // last: started after the rest is built
};

void drain_one_worker_pool(weft::thread_pool& pool) { REQUIRE(weft_test::drain_one_worker_pool(pool)); }

}  // namespace

TEST_CASE("channel: try_push and try_pull report ok, full, empty and closed", "[channel]") {
  no_failures_at_exit guard;
  weft::channel<int> ch{2};
  CHECK(ch.capacity() == 2);
  int out = -1;
  CHECK(ch.try_pull(out) == channel_status::empty);
  CHECK(ch.try_push(1) == channel_status::ok);
  CHECK(ch.try_push(2) == channel_status::ok);
  CHECK(ch.try_push(3) == channel_status::full);
  CHECK(ch.size() == 2);
  CHECK(ch.try_pull(out) == channel_status::ok);
  CHECK(out == 1);
  ch.close();
  CHECK(ch.closed());
  CHECK(ch.try_push(4) == channel_status::closed);
  CHECK(ch.try_pull(out) == channel_status::ok);  // pushed before the close: still delivered
  CHECK(out == 2);
  CHECK(ch.try_pull(out) == channel_status::closed);
  ch.close();  // idempotent
  CHECK(ch.try_pull(out) == channel_status::closed);

  weft::channel<int> unbounded;
  CHECK(unbounded.capacity() == weft::channel<int>::unbounded);
  for (int i = 0; i < 100'000; ++i) REQUIRE(unbounded.try_push(i) == channel_status::ok);
  for (int i = 0; i < 100'000; ++i) {
    REQUIRE(unbounded.try_pull(out) == channel_status::ok);
    REQUIRE(out == i);
  }
  CHECK(unbounded.try_pull(out) == channel_status::empty);
}

TEST_CASE("channel: capacity 0 is an error with a message", "[channel]") {
  no_failures_at_exit guard;
  CHECK_THROWS_AS(weft::channel<int>{0}, std::invalid_argument);
  CHECK_THROWS_WITH(weft::channel<int>{0}, Catch::Contains("capacity"));
}

TEST_CASE("channel: a bounded capacity above max_bounded_capacity is an error with a message", "[channel]") {
  no_failures_at_exit guard;
  using ch_t = weft::channel<int>;
  CHECK_THROWS_AS(ch_t{ch_t::max_bounded_capacity + 1}, std::invalid_argument);
  CHECK_THROWS_WITH(ch_t{ch_t::max_bounded_capacity + 1}, Catch::Contains("unbounded"));
  CHECK_THROWS_AS(ch_t{ch_t::unbounded - 1}, std::invalid_argument);
  ch_t largest_small{1u << 16};  // a bounded channel allocates its slots up front
  CHECK(largest_small.capacity() == 1u << 16);
}

namespace {
// A value whose move assignment throws while `fail` is set (its move construction never
// does, as a channel element's must not).
struct touchy {
  int value = 0;
  static inline bool fail = false;
  touchy() = default;
  explicit touchy(int v) noexcept : value(v) {}
  touchy(touchy&& o) noexcept : value(o.value) {}
  touchy& operator=(touchy&& o) {
    if (fail) throw std::runtime_error("touchy: assignment refused");
    value = o.value;
    return *this;
  }
};
}  // namespace

TEST_CASE("channel: a pull whose assignment throws puts the element back at the front", "[channel]") {
  no_failures_at_exit guard;
  for (const std::size_t capacity : {std::size_t{4}, weft::channel<touchy>::unbounded}) {
    weft::channel<touchy> ch{capacity};
    for (int i = 1; i <= 3; ++i) REQUIRE(ch.try_push(touchy{i}) == channel_status::ok);
    touchy out;
    touchy::fail = true;
    CHECK_THROWS_AS(ch.try_pull(out), std::runtime_error);
    touchy::fail = false;
    CHECK(ch.size() == 3);  // nothing lost
    for (int i = 1; i <= 3; ++i) {
      REQUIRE(ch.try_pull(out) == channel_status::ok);
      CHECK(out.value == i);  // the one handed back first, then the rest in order
    }
    CHECK(ch.try_pull(out) == channel_status::empty);
  }
}

TEST_CASE("channel: a failed push leaves a move-only element with the caller", "[channel]") {
  no_failures_at_exit guard;
  weft::channel<std::unique_ptr<int>> ch{1};
  CHECK(ch.try_push(std::make_unique<int>(1)) == channel_status::ok);
  auto p = std::make_unique<int>(2);
  CHECK(ch.try_push(std::move(p)) == channel_status::full);
  REQUIRE(p != nullptr);  // not moved from
  ch.close();
  CHECK(ch.try_push(std::move(p)) == channel_status::closed);
  REQUIRE(p != nullptr);
  CHECK_FALSE(ch.push_wait(std::move(p)));
  std::unique_ptr<int> out;
  CHECK(ch.try_pull(out) == channel_status::ok);
  CHECK(*out == 1);
}

TEST_CASE("channel: elements left in a destroyed channel are destroyed", "[channel]") {
  no_failures_at_exit guard;
  std::atomic<int> live{0};
  {
    weft::channel<weft_test::tracker> ch;
    for (int i = 0; i < 5000; ++i) REQUIRE(ch.try_push(weft_test::tracker{live}) == channel_status::ok);
    CHECK(live.load() == 5000);
  }
  CHECK(live.load() == 0);
}

TEMPLATE_LIST_TEST_CASE("channel: tasks see FIFO order, then the end after close", "[channel]",
                        weft_test::executor_kinds) {
  no_failures_at_exit guard;
  WEFT_TEST_EXECUTOR(pool);
  for (std::size_t capacity : {std::size_t{1}, std::size_t{7}, weft::channel<int>::unbounded}) {
    weft::channel<int> ch{capacity};
    auto body = [&]() -> weft::task<std::vector<int>> {
      auto consumer = weft::spawn(consume_all(ch)).fork();
      co_await produce(ch, 0, 20'000);
      ch.close();
      co_return co_await consumer;
    };
    const std::vector<int> got = weft::sync_wait(pool, body());
    REQUIRE(got.size() == 20'000);
    for (int i = 0; i < 20'000; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == i);
  }
}

TEST_CASE("channel: a producer suspends at capacity and resumes when there is room", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool pool{{.threads = 1}};
  weft::channel<int> ch{4};
  std::atomic<int> attempted{0}, pushed{0};
  auto producer = [&]() -> weft::task<void> {
    for (int v = 0; v < 10; ++v) {
      attempted.store(v + 1, std::memory_order_release);
      expect(co_await ch.push(v));
      pushed.store(v + 1, std::memory_order_release);
    }
  };
  weft::post(pool, producer());
  REQUIRE(eventually([&] { return attempted.load(std::memory_order_acquire) == 5; }));
  // The only worker is free again: the producer is suspended, not spinning or blocking.
  drain_one_worker_pool(pool);
  CHECK(pushed.load(std::memory_order_acquire) == 4);
  CHECK(ch.size() == 4);
  CHECK(attempted.load(std::memory_order_acquire) == 5);
  for (int v = 0; v < 10; ++v) {
    const std::optional<int> got = ch.pull_wait();
    REQUIRE(got.has_value());
    CHECK(*got == v);
    CHECK(ch.size() <= 4);
  }
  REQUIRE(eventually([&] { return pushed.load(std::memory_order_acquire) == 10; }));
  drain_one_worker_pool(pool);
}

TEST_CASE("channel: suspended consumers are served in FIFO order", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool pool{{.threads = 1}};
  weft::channel<int> ch;
  constexpr int k_n = 8;
  std::optional<int> got[k_n];
  std::atomic<int> done{0};
  for (int i = 0; i < k_n; ++i) weft::post(pool, pull_one(ch, got[i], done));
  drain_one_worker_pool(pool);  // all eight suspended, in posting order
  CHECK(done.load() == 0);
  for (int i = 0; i < k_n; ++i) REQUIRE(ch.try_push(100 + i) == channel_status::ok);
  REQUIRE(eventually([&] { return done.load(std::memory_order_acquire) == k_n; }));
  for (int i = 0; i < k_n; ++i) {
    REQUIRE(got[i].has_value());
    CHECK(*got[i] == 100 + i);
  }
}

TEST_CASE("channel: suspended producers are served in FIFO order", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool pool{{.threads = 1}};
  weft::channel<int> ch{1};
  REQUIRE(ch.try_push(-1) == channel_status::ok);
  constexpr int k_n = 8;
  std::atomic<int> results[k_n] = {};
  std::atomic<int> done{0};
  for (int i = 0; i < k_n; ++i) weft::post(pool, push_one(ch, i, results[i], done));
  drain_one_worker_pool(pool);
  CHECK(done.load() == 0);
  for (int i = -1; i < k_n; ++i) {
    const std::optional<int> v = ch.pull_wait();
    REQUIRE(v.has_value());
    CHECK(*v == i);
  }
  REQUIRE(eventually([&] { return done.load(std::memory_order_acquire) == k_n; }));
  for (auto& r : results) CHECK(r.load() == 1);
}

TEST_CASE("channel: close wakes waiting consumers with the end and waiting producers with false", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool pool{{.threads = 1}};
  weft::channel<int> empty;
  std::optional<int> got[3] = {7, 7, 7};
  std::atomic<int> pulled{0};
  for (auto& g : got) weft::post(pool, pull_one(empty, g, pulled));
  weft::channel<int> full{1};
  REQUIRE(full.try_push(0) == channel_status::ok);
  std::atomic<int> results[3] = {-1, -1, -1};
  std::atomic<int> pushed{0};
  for (int i = 0; i < 3; ++i) weft::post(pool, push_one(full, i + 1, results[i], pushed));
  drain_one_worker_pool(pool);
  CHECK(pulled.load() + pushed.load() == 0);
  empty.close();
  full.close();
  REQUIRE(eventually([&] { return pulled.load(std::memory_order_acquire) == 3 && pushed.load() == 3; }));
  for (auto& g : got) CHECK_FALSE(g.has_value());
  for (auto& r : results) CHECK(r.load() == 0);
  // The element pushed before the close is still there; the rejected ones are not.
  CHECK(full.pull_wait() == std::optional<int>{0});
  CHECK(full.pull_wait() == std::nullopt);
}

TEST_CASE("channel: woken tasks resume on the executor they suspended on", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool producers{{.threads = 2}};
  weft::thread_pool consumers{{.threads = 2}};
  weft::channel<int> ch{3};
  std::atomic<int> wrong_pool{0};
  auto producer = [&](int first) -> weft::task<void> {
    for (int v = first; v < first + 5000; ++v) {
      expect(co_await ch.push(v));
      if (!producers.owns_current_thread()) wrong_pool.fetch_add(1);
    }
  };
  auto consumer = [&]() -> weft::task<long> {
    long sum = 0;
    while (auto v = co_await ch.pull()) {
      if (!consumers.owns_current_thread()) wrong_pool.fetch_add(1);
      sum += *v;
    }
    co_return sum;
  };
  auto consume_side = [&]() -> weft::task<long> {
    auto a = weft::spawn(consumer()).fork();
    auto b = co_await consumer();
    co_return b + co_await a;
  };
  auto produce_side = [&]() -> weft::task<void> {
    auto a = weft::spawn(producer(0)).fork();
    co_await producer(5000);
    co_await a;
  };
  long sum = 0;
  std::thread c([&] { sum = weft::sync_wait(consumers, consume_side()); });
  std::thread extra([&] {  // a plain thread producing too
    for (int v = 10'000; v < 12'000; ++v) expect(ch.push_wait(v));
  });
  weft::sync_wait(producers, produce_side());
  extra.join();
  ch.close();
  c.join();
  CHECK(wrong_pool.load() == 0);
  CHECK(sum == 12'000L * 11'999 / 2);
}

TEST_CASE("channel: push_wait and pull_wait between plain threads deliver everything once", "[channel]") {
  no_failures_at_exit guard;
  constexpr int k_per = 5000, k_producers = 3, k_consumers = 3;
  weft::channel<int> ch{8};
  std::vector<std::atomic<int>> seen(k_per * k_producers);
  std::vector<std::thread> threads;
  for (int p = 0; p < k_producers; ++p)
    threads.emplace_back([&, p] {
      for (int i = 0; i < k_per; ++i) expect(ch.push_wait(p * k_per + i));
    });
  std::atomic<int> total{0};
  for (int c = 0; c < k_consumers; ++c)
    threads.emplace_back([&] {
      while (auto v = ch.pull_wait()) {
        seen[static_cast<std::size_t>(*v)].fetch_add(1, std::memory_order_relaxed);
        total.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (int p = 0; p < k_producers; ++p) threads[static_cast<std::size_t>(p)].join();
  ch.close();
  for (std::size_t i = k_producers; i < threads.size(); ++i) threads[i].join();
  CHECK(total.load() == k_per * k_producers);
  for (auto& s : seen) REQUIRE(s.load() == 1);
}

TEST_CASE("channel: bulk push and pull", "[channel]") {
  no_failures_at_exit guard;
  weft::channel<int> ch{5};
  std::vector<int> in{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(ch.try_push_n(in.begin(), in.size()) == 5);  // up to the capacity
  std::vector<int> out;
  CHECK(ch.try_pull_n(std::back_inserter(out), 3) == 3);
  CHECK(out == std::vector<int>{0, 1, 2});
  CHECK(ch.try_pull_n(std::back_inserter(out), 10) == 2);
  CHECK(ch.try_pull_n(std::back_inserter(out), 10) == 0);
  CHECK_FALSE(ch.closed());

  weft::thread_pool pool{{.threads = 2}};
  weft::channel<int> bulk{16};
  std::vector<int> data(10'000);
  for (int i = 0; i < 10'000; ++i) data[static_cast<std::size_t>(i)] = i;
  auto body = [&]() -> weft::task<std::vector<int>> {
    auto reader = [&]() -> weft::task<std::vector<int>> {
      std::vector<int> got;
      while (co_await bulk.pull_n(std::back_inserter(got), 100) != 0) {
      }
      co_return got;
    };
    auto r = weft::spawn(reader()).fork();
    expect(co_await bulk.push_n(data.begin(), data.size()) == data.size());
    bulk.close();
    expect(co_await bulk.push_n(data.begin(), 3) == 0);
    co_return co_await r;
  };
  CHECK(weft::sync_wait(pool, body()) == data);
}

TEST_CASE("channel: works on an executor that is not a thread_pool", "[channel]") {
  no_failures_at_exit guard;
  thread_executor single;
  weft::thread_pool pool{{.threads = 2}};
  weft::channel<int> ch{2};
  std::atomic<int> wrong{0};
  auto consumer = [&]() -> weft::task<long> {
    long sum = 0;
    while (auto v = co_await ch.pull()) {
      if (!single.owns_current_thread()) wrong.fetch_add(1);
      sum += *v;
    }
    co_return sum;
  };
  auto producer = [&]() -> weft::task<void> {
    for (int v = 0; v < 20'000; ++v) {
      expect(co_await ch.push(v));
      if (!pool.owns_current_thread()) wrong.fetch_add(1);
    }
    ch.close();
  };
  long sum = 0;
  std::thread c([&] { sum = weft::sync_wait(single, consumer()); });
  weft::sync_wait(pool, producer());
  c.join();
  CHECK(sum == 20'000L * 19'999 / 2);
  CHECK(wrong.load() == 0);
}

TEST_CASE("channel: a long backlog grows into many blocks and drains in order", "[channel]") {
  no_failures_at_exit guard;
  weft::channel<std::uint64_t> ch;
  constexpr std::uint64_t k_n = 3'000'000;   // 24 MB: blocks cut from several 2 MiB chunks
  for (int round = 0; round < 2; ++round) {  // the second round reuses nothing it freed
    bool pushed = true;
    for (std::uint64_t i = 0; i < k_n; ++i) pushed &= ch.try_push(i) == channel_status::ok;
    CHECK(pushed);
    CHECK(ch.size() == k_n);
    std::uint64_t v = 0;
    bool in_order = true;
    for (std::uint64_t i = 0; i < k_n; ++i) in_order &= ch.try_pull(v) == channel_status::ok && v == i;
    CHECK(in_order);
    CHECK(ch.try_pull(v) == channel_status::empty);
  }
  // Interleaved: a backlog that shrinks and grows again.
  std::uint64_t next_in = 0, next_out = 0;
  bool in_order = true;
  for (int wave = 0; wave < 20; ++wave) {
    for (int i = 0; i < 70'000; ++i) in_order &= ch.try_push(next_in++) == channel_status::ok;
    std::uint64_t v = 0;
    for (int i = 0; i < 50'000; ++i) in_order &= ch.try_pull(v) == channel_status::ok && v == next_out++;
  }
  std::vector<std::uint64_t> rest;
  ch.try_pull_n(std::back_inserter(rest), 1u << 30);
  for (std::uint64_t v : rest) in_order &= v == next_out++;
  CHECK(in_order);
  CHECK(next_out == next_in);
}

namespace {
// An output iterator whose second write throws.
struct throwing_out {
  using difference_type = std::ptrdiff_t;
  std::vector<int>* sink;
  int* writes;
  throwing_out& operator*() { return *this; }
  throwing_out& operator=(int v) {
    if (++*writes == 2) throw std::runtime_error("throwing_out: full");
    sink->push_back(v);
    return *this;
  }
  throwing_out& operator++() { return *this; }
  throwing_out operator++(int) { return *this; }
};
}  // namespace

TEST_CASE("channel: a throwing output iterator loses neither elements nor wake-ups", "[channel]") {
  no_failures_at_exit guard;
  weft::thread_pool pool{{.threads = 1}};
  weft::channel<int> ch{1};
  REQUIRE(ch.try_push(1) == channel_status::ok);
  std::atomic<int> result{-1}, done{0};
  weft::post(pool, push_one(ch, 2, result, done));  // suspends: the channel is full
  drain_one_worker_pool(pool);
  CHECK(done.load() == 0);
  std::vector<int> got;
  int writes = 0;
  CHECK_THROWS_AS(ch.try_pull_n(throwing_out{&got, &writes}, 5), std::runtime_error);
  CHECK(got == std::vector<int>{1});
  // The producer was handed the freed place before the throw, and is woken anyway.
  REQUIRE(eventually([&] { return done.load(std::memory_order_acquire) == 1; }));
  CHECK(result.load() == 1);
  int v = 0;
  CHECK(ch.try_pull(v) == channel_status::ok);
  CHECK(v == 2);
}
