// weft::io::io_pool: a thread_pool whose workers each own an io_uring ring. Echo over
// one SO_REUSEPORT listener per worker, with every byte checked; a lone operation
// resumes on the worker that started it, while tasks that all started on one worker
// spread over idle ones; operations from threads outside the pool; timers;
// compute forks from connection tasks; cancellation through a scope's token; a
// connection's exception and the server's reaching their catch with no connection left; the
// parked workers still wake for posted work. Skipped where io_uring is unavailable.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
namespace wio = weft::io;
using weft_io_test::failures;

namespace {

weft::task<void> echo(wio::tcp_stream s) {
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto [ec, n] = co_await s.read_some(buf.data(), buf.size());
    if (ec) co_return;
    auto w = co_await s.write_all(buf.data(), n);
    if (w.ec) co_return;
  }
}

weft::task<void> accept_loop(wio::tcp_listener& l, weft::scope<void>& conns, std::atomic<int>& accepted) {
  for (;;) {
    auto [ec, s] = co_await l.accept();
    if (ec) co_return;
    accepted.fetch_add(1, std::memory_order_relaxed);
    conns.spawn(echo, std::move(s));
  }
}

// The server: one listener per worker of `io` on the same port (SO_REUSEPORT), each with
// its accept loop; serve_while() runs them while `work` runs, then stops the loops and
// waits for the connections (which end when their clients close).
struct server {
  explicit server(wio::io_pool& io) {
    std::uint16_t port = 0;
    for (std::size_t i = 0; i < io.thread_count(); ++i) {
      m_listeners.push_back(std::make_unique<wio::tcp_listener>(io, i));
      const auto ec =
          m_listeners.back()->listen(wio::endpoint::loopback(port), wio::listen_options{.reuse_port = true});
      REQUIRE_FALSE(ec);
      port = m_listeners.back()->local_endpoint().port();
    }
    m_endpoint = wio::endpoint::loopback(port);
  }
  std::vector<std::unique_ptr<wio::tcp_listener>> m_listeners;
  wio::endpoint m_endpoint;
  std::atomic<int> m_accepted{0};
};

weft::task<void> serve_while(server& srv, weft::task<void> work) {
  weft::scope<> conns;
  weft::scope<> loops;
  for (auto& l : srv.m_listeners) loops.spawn(accept_loop, std::ref(*l), std::ref(conns), std::ref(srv.m_accepted));
  co_await std::move(work);
  loops.request_stop();
  co_await loops.join();
  co_await conns.join();
}

// A client on the pool: `messages` messages of random sizes, each read back and checked.
weft::task<void> client(wio::io_pool& io, wio::endpoint at, std::uint32_t seed, int messages, failures& fail,
                        std::atomic<std::uint64_t>& bytes) {
  wio::tcp_stream s(io);
  if (auto ec = co_await s.connect(at)) {
    fail.add("connect: " + ec.message());
    co_return;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> size(1, 16 * 1024);
  std::vector<char> out, in;
  for (int m = 0; m < messages; ++m) {
    const std::size_t n = size(rng);
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>(rng());
    auto w = co_await s.write_all(out.data(), n);
    if (w.ec) {
      fail.add("write: " + w.ec.message());
      co_return;
    }
    in.assign(n, 0);
    std::size_t got = 0;
    while (got < n) {
      auto [ec, k] = co_await s.read_some(in.data() + got, n - got);
      if (ec) {
        fail.add("read: " + ec.message());
        co_return;
      }
      got += k;
    }
    if (std::memcmp(in.data(), out.data(), n) != 0) {
      fail.add("echo differs");
      co_return;
    }
    bytes.fetch_add(n, std::memory_order_relaxed);
  }
}

weft::task<void> clients(wio::io_pool& io, wio::endpoint at, int count, int messages, failures& fail,
                         std::atomic<std::uint64_t>& bytes) {
  weft::scope<> all;
  for (int i = 0; i < count; ++i)
    all.spawn(client, std::ref(io), at, static_cast<std::uint32_t>(i + 1), messages, std::ref(fail), std::ref(bytes));
  co_await all.join();
}

}  // namespace

TEST_CASE("io_pool: echo over one reuse_port listener per worker, every byte checked", "[io][io_pool]") {
  for (std::size_t threads : {1u, 2u, 4u}) {
    auto io = weft_io_test::make_io_pool_or_skip(threads);
    if (!io) return;
    server srv(*io);
    failures fail;
    std::atomic<std::uint64_t> bytes{0};
    constexpr int k_clients = 64, k_messages = 20;
    weft::sync_wait(*io, serve_while(srv, clients(*io, srv.m_endpoint, k_clients, k_messages, fail, bytes)));
    INFO(threads << " threads: " << fail.m_count << " clients failed; first: " << fail.m_first);
    CHECK(fail.m_count == 0);
    CHECK(srv.m_accepted.load() == k_clients);
    CHECK(bytes.load() > 0);
  }
}

namespace {
// The pool's only I/O: one task, whose peer is a plain thread echoing over a socketpair.
// Each of its completions is alone in its worker's batch, so it resumes on the worker
// that started the operation even while the other worker is idle and asking for work.
weft::task<bool> same_thread_across_reads(wio::io_pool& io, int fd, int rounds) {
  wio::tcp_stream s(io, fd);
  bool same = true;
  char c = 'x';
  for (int i = 0; i < rounds; ++i) {
    const auto before = std::this_thread::get_id();
    auto w = co_await s.write_all(&c, 1);
    auto r = co_await s.read_some(&c, 1);
    if (w.ec || r.ec) co_return false;
    same = same && before == std::this_thread::get_id();
  }
  co_return same;
}

// Echoes one byte at a time on a blocking socket until the peer closes.
void echo_blocking(int fd) {
  char c = 0;
  while (::read(fd, &c, 1) == 1)
    if (::write(fd, &c, 1) != 1) break;
  ::close(fd);
}
}  // namespace

TEST_CASE("io_pool: a task resumes on the worker that started its operation", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  std::thread peer(echo_blocking, sv[1]);
  const bool same = weft::sync_wait(*io, same_thread_across_reads(*io, sv[0], 200));
  peer.join();  // the stream closed sv[0] when the task ended
  CHECK(same);
}

namespace {
thread_local int t_worker_index = -1;  // set by the pool's on_thread_start

// One end of a socketpair each: a byte out, the byte back in, `rounds` times; counts
// the rounds each worker ran.
weft::task<void> ping_pair(wio::io_pool& io, int rounds, std::vector<std::atomic<long>>& per_worker, failures& fail) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    fail.add("socketpair failed");
    co_return;
  }
  wio::tcp_stream a(io, sv[0]), b(io, sv[1]);
  char out = 'p', in = 0;
  for (int i = 0; i < rounds; ++i) {
    auto w = co_await a.write_some(&out, 1);
    auto r = co_await b.read_some(&in, 1);
    if (w.ec || r.ec || w.n != 1 || r.n != 1 || in != out) {
      fail.add("ping failed");
      co_return;
    }
    per_worker[static_cast<std::size_t>(t_worker_index)].fetch_add(1, std::memory_order_relaxed);
  }
}
}  // namespace

TEST_CASE("io_pool: tasks woken by one worker's completions spread over idle workers", "[io][io_pool]") {
  // Every task starts on the spawning worker (it runs each until its first operation
  // before another worker wakes) and comes back there from its ring; only the offer of
  // a completion to a worker that asked for work moves tasks. Without it the other
  // workers stay parked for the whole run.
  for (const std::size_t threads : {std::size_t{2}, std::size_t{4}}) {
    weft::pool_options o{.threads = threads};
    o.on_thread_start = [](std::size_t i) { t_worker_index = static_cast<int>(i); };
    auto io = weft_io_test::make_io_pool_or_skip(o);
    if (!io) return;
    constexpr int k_tasks = 64, k_rounds = 500;
    std::vector<std::atomic<long>> per_worker(threads);
    failures fail;
    weft::sync_wait(*io, [&]() -> weft::task<void> {
      weft::scope<> all;
      for (int i = 0; i < k_tasks; ++i)
        all.spawn(ping_pair, std::ref(*io), k_rounds, std::ref(per_worker), std::ref(fail));
      co_await all.join();
    }());
    INFO(threads << " threads: " << fail.m_count << " tasks failed; first: " << fail.m_first);
    CHECK(fail.m_count == 0);
    long total = 0;
    for (auto& n : per_worker) total += n.load();
    CHECK(total == long{k_tasks} * k_rounds);
    // At least two workers ran 5 % of the rounds or more: every worker of the 2-thread
    // pool; of the 4-thread one, as many as the pool keeps awake (it wakes a parked
    // worker only while nobody searches, and this machine may have 2 cores).
    std::size_t busy = 0;
    std::string spread;
    for (std::size_t w = 0; w < threads; ++w) {
      if (per_worker[w].load() * 20 >= total) ++busy;
      spread += " " + std::to_string(per_worker[w].load());
    }
    INFO(threads << " threads: rounds per worker:" << spread);
    CHECK(busy >= 2);
  }
}

namespace {
weft::task<void> wait_event(weft::manual_reset_event& ev) { co_await ev.wait(); }
weft::task<void> await_fork(weft::fork_handle<void>& h) { co_await h; }

// Fork-join fib on the pool's workers, from inside a connection.
weft::task<long> fib(int n) {
  if (n < 2) co_return n;
  auto a = weft::spawn(fib(n - 1)).fork();
  const long b = co_await fib(n - 2);
  co_return co_await a + b;
}

weft::task<void> fib_echo(wio::tcp_stream s, std::atomic<int>& wrong) {
  char c = 0;
  for (;;) {
    auto [ec, n] = co_await s.read_some(&c, 1);
    if (ec) co_return;
    const long f = co_await fib(c);  // compute forks from a connection task
    if (f != (c == 20 ? 6765 : -1)) wrong.fetch_add(1);
    auto w = co_await s.write_all(&c, 1);
    if (w.ec) co_return;
  }
}
}  // namespace

TEST_CASE("io_pool: operations awaited from threads outside the pool", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  server srv(*io);
  failures fail;
  std::atomic<std::uint64_t> bytes{0};
  // The server runs on the pool; the clients on another pool, whose operations go to
  // the io_pool's rings and resume on their own pool.
  weft::manual_reset_event done;
  auto served = weft::spawn(serve_while(srv, wait_event(done))).run_on(*io).fork();
  {
    weft::thread_pool other{{.threads = 1}};
    for (std::uint32_t i = 0; i < 8; ++i) weft::sync_wait(other, client(*io, srv.m_endpoint, 100 + i, 10, fail, bytes));
  }
  done.set();
  weft::sync_wait(*io, await_fork(served));
  INFO(fail.m_count << " failed; first: " << fail.m_first);
  CHECK(fail.m_count == 0);
  CHECK(srv.m_accepted.load() == 8);
  CHECK(bytes.load() > 0);
}

namespace {
weft::task<void> sleep_then_count(wio::io_pool& pool, std::atomic<int>& count, int i) {
  auto ec = co_await wio::sleep_for(pool, std::chrono::milliseconds(1 + i % 20));
  if (!ec) count.fetch_add(1);
}

weft::task<void> many_timers(wio::io_pool& pool, std::atomic<int>& count) {
  weft::scope<> s;
  for (int i = 0; i < 500; ++i) s.spawn(sleep_then_count, std::ref(pool), std::ref(count), i);
  co_await s.join();
}

weft::task<int> seven() { co_return 7; }
}  // namespace

TEST_CASE("io_pool: timers on the workers, and posted work still wakes parked workers", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  std::atomic<int> woke{0};
  const auto t0 = std::chrono::steady_clock::now();
  weft::sync_wait(*io, many_timers(*io, woke));
  CHECK(woke.load() == 500);
  CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);
  // Idle workers wait in their rings: work posted from here must still wake them.
  for (int i = 0; i < 2000; ++i) CHECK(weft::sync_wait(*io, seven()) == 7);
}

namespace {
weft::task<void> fib_client(wio::io_pool& pool, wio::endpoint to, failures& f) {
  wio::tcp_stream s(pool);
  if (auto ec = co_await s.connect(to)) {
    f.add("connect: " + ec.message());
    co_return;
  }
  for (int k = 0; k < 5; ++k) {
    char c = 20;
    auto w = co_await s.write_all(&c, 1);
    auto r = co_await s.read_some(&c, 1);
    if (w.ec || r.ec || c != 20) f.add("fib echo failed");
  }
}

weft::task<void> fib_service(wio::io_pool& pool, wio::tcp_listener& listener, std::atomic<int>& wrong_results,
                             failures& f) {
  weft::scope<> conns;
  weft::scope<> clients;
  for (int i = 0; i < 8; ++i) clients.spawn(fib_client, std::ref(pool), listener.local_endpoint(), std::ref(f));
  for (int i = 0; i < 8; ++i) {
    auto [ec, s] = co_await listener.accept();
    if (ec) {
      f.add("accept: " + ec.message());
      break;
    }
    conns.spawn(fib_echo, std::move(s), std::ref(wrong_results));
  }
  co_await clients.join();
  co_await conns.join();
  listener.close();
}
}  // namespace

TEST_CASE("io_pool: compute forks inside connection tasks", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  wio::tcp_listener l(*io, 0);
  REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
  std::atomic<int> wrong{0};
  failures fail;
  weft::sync_wait(*io, fib_service(*io, l, wrong, fail));
  INFO(fail.m_first);
  CHECK(fail.m_count == 0);
  CHECK(wrong.load() == 0);
}

namespace {
weft::task<void> read_until_stopped(wio::tcp_stream s, std::atomic<int>& cancelled) {
  char c;
  auto [ec, n] = co_await s.read_some(&c, 1);  // nobody writes: only the stop ends it
  if (ec == std::errc::operation_canceled) cancelled.fetch_add(1);
}

// Accepts 32 connections whose peers never write, starts a read on each, then stops them.
weft::task<void> stop_readers(wio::io_pool& pool, wio::tcp_listener& listener, std::atomic<int>& cancelled) {
  weft::scope<> readers;
  for (int i = 0; i < 32; ++i) {
    auto [ec, s] = co_await listener.accept();
    if (ec) co_return;
    readers.spawn(read_until_stopped, std::move(s), std::ref(cancelled));
  }
  co_await wio::sleep_for(pool, 20ms);  // the reads are in flight (on whichever rings)
  readers.request_stop();
  co_await readers.join();
  listener.close();
}
}  // namespace

TEST_CASE("io_pool: a scope's stop ends reads pending on every worker; fds come back", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  const std::size_t fds_before = weft_io_test::fd_count();
  std::atomic<int> cancelled{0};
  {
    wio::tcp_listener l(*io, 1);
    REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
    std::vector<int> peers;
    for (int i = 0; i < 32; ++i) peers.push_back(weft_io_test::connect_plain(l.local_endpoint()));
    weft::sync_wait(*io, stop_readers(*io, l, cancelled));
    for (int fd : peers) ::close(fd);
  }
  CHECK(cancelled.load() == 32);
  // The listener's socket is closed once its ring has reaped the cancelled accept
  // (asynchronous, on worker 1): a bounded wait.
  CHECK(weft_io_test::settled_fd_count(fds_before) == fds_before);
}

namespace {
// A connection whose request is bad: reads its one byte, then throws.
weft::task<void> fail_after_read(wio::tcp_stream s) {
  char c;
  co_await s.read_some(&c, 1);
  throw std::runtime_error("bad request");
}

// Accepts 8 connections (the last one bad), then reaps them with next(): the bad one's
// exception reaches the catch once the other 7 were stopped and have ended. Evaluates to
// the reads cancelled at the catch, -1 when nothing was caught.
weft::task<int> reap_until_one_fails(wio::tcp_listener& listener, std::atomic<int>& cancelled) {
  try {
    weft::scope<> conns;
    for (int i = 0; i < 8; ++i) {
      auto [ec, s] = co_await listener.accept();
      if (ec) throw std::system_error(ec, "accept");
      if (i == 7)
        conns.spawn(fail_after_read, std::move(s));
      else
        conns.spawn(read_until_stopped, std::move(s), std::ref(cancelled));
    }
    for (;;) {
      const bool got = co_await conns.next();
      if (!got) break;
    }
  } catch (const std::runtime_error&) {
    co_return cancelled.load();
  }
  co_return -1;
}

// Accepts 8 connections into a with_scope, then throws itself: with_scope stops them and
// waits for them before the exception goes on.
weft::task<int> throw_with_connections_open(wio::tcp_listener& listener, std::atomic<int>& cancelled) {
  try {
    co_await weft::with_scope([&](weft::scope<>& conns) -> weft::task<void> {
      for (int i = 0; i < 8; ++i) {
        auto [ec, s] = co_await listener.accept();
        if (ec) throw std::system_error(ec, "accept");
        conns.spawn(read_until_stopped, std::move(s), std::ref(cancelled));
      }
      throw std::logic_error("the server's own failure");
    });
  } catch (const std::logic_error&) {
    co_return cancelled.load();
  }
  co_return -1;
}

// Both servers above over a listener of `io` (their tasks run on `ex`), each with 8
// plain peers (for the first, the 8th writes one byte).
template <class IO>
void failing_servers(IO& io, weft::executor& ex) {
  const std::size_t fds_before = weft_io_test::fd_count();
  for (int which = 0; which < 2; ++which) {
    std::atomic<int> cancelled{0};
    wio::tcp_listener l(io);
    REQUIRE_FALSE(l.listen(wio::endpoint::loopback(0)));
    std::vector<int> peers;
    for (int i = 0; i < 8; ++i) peers.push_back(weft_io_test::connect_plain(l.local_endpoint()));
    if (which == 0) REQUIRE(::write(peers[7], "x", 1) == 1);  // the bad request
    const int r = weft::sync_wait(
        ex, which == 0 ? reap_until_one_fails(l, cancelled) : throw_with_connections_open(l, cancelled));
    CHECK(r == (which == 0 ? 7 : 8));
    for (int fd : peers) ::close(fd);
  }
  // Each listener's socket is closed once its ring has reaped the cancelled accept
  // (asynchronous): a bounded wait.
  CHECK(weft_io_test::settled_fd_count(fds_before) == fds_before);
}
}  // namespace

TEST_CASE("io_pool: a connection's exception, or the server's, reaches its catch with every connection ended",
          "[io][io_pool][scope]") {
  SECTION("io_pool") {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    failing_servers(*io, *io);
  }
  SECTION("uring_context, the tasks on a thread_pool") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::thread_pool pool{{.threads = 2}};
    failing_servers(*io, pool);
  }
}

TEST_CASE("io_pool: bad options", "[io][io_pool]") {
  CHECK_THROWS_AS(wio::io_pool(weft::pool_options{.threads = 0}), std::invalid_argument);
  CHECK_THROWS_AS(wio::io_pool(weft::pool_options{.threads = 5000}), std::invalid_argument);
  auto io = weft_io_test::make_io_pool_or_skip(2);
  if (!io) return;
  CHECK(io->ring_count() == 2);
  CHECK_THROWS_AS(wio::tcp_listener(*io, 2), std::out_of_range);
}

namespace {
// A timer completion resumes the task on its ring's worker while the other workers steal
// the children it forks, and tasks from outside the pool keep arriving.
weft::task<long> timer_then_fork(wio::io_pool& io, int rounds, std::uint32_t seed) {
  long sum = 0;
  for (int r = 0; r < rounds; ++r) {
    auto ec = co_await wio::sleep_for(io, std::chrono::microseconds((seed * 31 + r * 17) % 50));
    if (ec) co_return -1;
    auto child = weft::spawn(fib(10)).fork();
    sum += co_await fib(8) + co_await child;
  }
  co_return sum;
}

weft::task<long> timers_racing_steals(wio::io_pool& io, int tasks, int rounds) {
  weft::scope<long> all;
  for (int i = 0; i < tasks; ++i) all.spawn(timer_then_fork, std::ref(io), rounds, static_cast<std::uint32_t>(i));
  long total = 0;
  while (auto v = co_await all.next()) total += *v;
  co_return total;
}
}  // namespace

TEST_CASE("io_pool: completions racing steals (TSan stress)", "[io][io_pool]") {
  auto io = weft_io_test::make_io_pool_or_skip(4);  // more workers than CI's cores: preemption mid-protocol
  if (!io) return;
  constexpr int k_tasks = 200, k_rounds = 20;
  std::atomic<long> outside{0};
  std::thread poster([&] {
    for (int i = 0; i < 200; ++i) outside += weft::sync_wait(*io, fib(12));
  });
  const long total = weft::sync_wait(*io, timers_racing_steals(*io, k_tasks, k_rounds));
  poster.join();
  CHECK(total == long{k_tasks} * k_rounds * (55 + 21));
  CHECK(outside.load() == 200 * 144);
}
