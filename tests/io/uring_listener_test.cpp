// tcp_listener's back-pressure: a listener that is not accepting holds at most
// 2 * backlog + 1 connections (the rest wait in the kernel's listen queue), loses none, and
// takes connections again once accept() has drained what it held. Skipped (with a
// WARN naming the cause) where io_uring is unavailable.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "bounded_wait.hpp"
#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::endpoint;
using weft::io::tcp_listener;
using weft::io::tcp_stream;

namespace {

/// A non-blocking client socket whose connect to `at` has been started; -1 on failure.
int start_connect(const endpoint& at) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, at.data(), at.size()) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// The client's local port (what the server sees as its peer's port).
std::uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

/// The peer's port of an accepted stream.
std::uint16_t peer_port(const tcp_stream& s) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  REQUIRE(::getpeername(s.native_handle(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

/// Accepts `n` connections on the loop: their peers' ports.
std::vector<std::uint16_t> accept_n(weft::io::uring_context& io, tcp_listener& l, std::size_t n) {
  auto take = [&]() -> weft::task<std::vector<std::uint16_t>> {
    std::vector<std::uint16_t> ports;
    for (std::size_t i = 0; i < n; ++i) {
      auto [ec, s] = co_await l.accept();
      REQUIRE_FALSE(ec);
      ports.push_back(peer_port(s));
    }
    co_return ports;
  };
  return weft::sync_wait(io, take());
}

/// Starts a listener with `backlog`, makes one client and accepts it (which arms the
/// multishot accept), then starts `waiting` more clients that nobody accepts, and
/// samples for 300 ms how many connections the listener holds beyond the clients' own
/// sockets: the largest count seen.
struct not_accepting {
  std::unique_ptr<weft::io::uring_context> io = weft_io_test::make_uring_or_skip();
  tcp_listener l{*io};
  std::vector<int> clients;
  std::size_t held = 0;

  not_accepting(int backlog, int waiting) {
    REQUIRE_FALSE(l.listen(endpoint::loopback(0), backlog));
    const endpoint ep = l.local_endpoint();
    clients.push_back(start_connect(ep));
    REQUIRE(accept_n(*io, l, 1) == std::vector<std::uint16_t>{local_port(clients[0])});
    const std::size_t fds_before = weft_io_test::fd_count();
    for (int i = 0; i < waiting; ++i) {
      clients.push_back(start_connect(ep));
      REQUIRE(clients.back() >= 0);
    }
    for (auto until = std::chrono::steady_clock::now() + 300ms; std::chrono::steady_clock::now() < until;) {
      held = std::max(held, weft_io_test::fd_count() - fds_before - static_cast<std::size_t>(waiting));
      std::this_thread::sleep_for(2ms);  // sampling, not synchronisation
    }
  }
  ~not_accepting() {
    for (int fd : clients) ::close(fd);
    l.close();
  }
};

bool multishot_or_skip(weft::io::uring_context& io) {
  if (io.has_multishot_accept()) return true;
  WARN("SKIPPED: no multishot accept on this kernel (one accept per call takes nothing ahead)");
  return false;
}

}  // namespace

TEST_CASE("uring: a listener that is not accepting holds no more than its bound, then accepts again", "[io][uring]") {
  if (!weft_io_test::make_uring_or_skip()) return;
  constexpr int k_backlog = 4;
  constexpr int k_bound = 2 * k_backlog + 1;  // the documented bound (tcp_listener::listen)
  not_accepting t(k_backlog, 60);             // far more clients than the bound
  if (!multishot_or_skip(*t.io)) return;
  INFO("connections held by a listener not accepting: " << t.held << " (backlog " << k_backlog << ")");
  CHECK(t.held >= 1);  // it did take some ahead
  CHECK(t.held <= static_cast<std::size_t>(k_bound));
  // Draining what it held arms it again: the next connection (waiting in the kernel's
  // full listen queue) is accepted too.
  const auto ports = accept_n(*t.io, t.l, t.held + 1);
  CHECK(ports.size() == t.held + 1);
}

TEST_CASE("uring: a listener's back-pressure loses no connection", "[io][uring]") {
  if (!weft_io_test::make_uring_or_skip()) return;
  constexpr int k_backlog = 4;
  // As many as the bound: what the listener does not take fits the kernel's queue.
  constexpr int k_waiting = 2 * k_backlog + 1;
  not_accepting t(k_backlog, k_waiting);
  if (!multishot_or_skip(*t.io)) return;
  std::vector<std::uint16_t> want;
  for (std::size_t i = 1; i < t.clients.size(); ++i) want.push_back(local_port(t.clients[i]));
  auto got = accept_n(*t.io, t.l, k_waiting);  // every client, once
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  CHECK(got == want);
}

TEST_CASE("uring: listeners with reuse_port share one port, and the kernel spreads connections over them",
          "[io][uring]") {
  auto a = weft_io_test::make_uring_or_skip();
  if (!a) return;
  auto b = weft_io_test::make_uring_or_skip();
  tcp_listener la(*a), lb(*b);
  REQUIRE_FALSE(la.listen(endpoint::loopback(0), {.backlog = 256, .reuse_port = true}));
  const endpoint at = la.local_endpoint();
  REQUIRE_FALSE(lb.listen(at, {.backlog = 256, .reuse_port = true}));
  CHECK(lb.local_endpoint().port() == at.port());
  // Without reuse_port the port is taken.
  tcp_listener lc(*a);
  CHECK(lc.listen(at) == std::errc::address_in_use);

  constexpr int k_clients = 64;
  std::vector<int> clients;
  for (int i = 0; i < k_clients; ++i) {
    const int c = weft_io_test::connect_plain(at);
    REQUIRE(c >= 0);
    clients.push_back(c);
  }
  // Each listener accepts until the other has taken the rest: count both.
  std::atomic<int> total{0};
  const auto drain = [&](weft::io::uring_context& io, tcp_listener& l) {
    return weft::sync_wait(io, [](tcp_listener& lst, std::atomic<int>& t) -> weft::task<int> {
      int n = 0;
      while (t.load() < k_clients) {
        auto r = co_await weft::with_timeout(lst.accept(), 20ms);
        if (r.ec || !r.value || r.value->ec) continue;  // nothing for this one now: check the total again
        ++n;
        t.fetch_add(1);
      }
      co_return n;
    }(l, total));
  };
  int na = 0, nb = 0;
  std::thread tb([&] { nb = drain(*b, lb); });
  na = drain(*a, la);
  tb.join();
  CHECK(na + nb == k_clients);
  CHECK(na > 0);  // 64 connections from distinct ports: both get some (the kernel hashes the 4-tuple)
  CHECK(nb > 0);
  for (int c : clients) ::close(c);
}

namespace {

weft::task<void> accept_once(tcp_listener& l, std::stop_token tok, std::error_code& got, std::atomic<int>& done) {
  auto r = co_await weft::io::with_cancel(l.accept(), std::move(tok));
  got = r.ec;
  done.store(1, std::memory_order_release);
}

/// A listener whose one accept() (awaited on `ex`) was stopped while it waited; then
/// `k_clients` clients connect. Returns the descriptors the process gained beyond the
/// clients' own sockets (connections the listener took with nobody to serve them), and
/// checks that a later accept() still gets every client.
std::size_t taken_after_stop(weft::io::uring_context& io, weft::executor& ex, weft::thread_pool* pool) {
  constexpr int k_backlog = 8;
  constexpr std::size_t k_clients = 8;
  tcp_listener l(io, 0);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0), k_backlog));
  const endpoint ep = l.local_endpoint();
  std::stop_source stop;
  std::atomic<int> done{0};
  std::error_code got;
  weft::post(ex, accept_once(l, stop.get_token(), got, done));
  if (pool != nullptr) REQUIRE(weft_test::drain_one_worker_pool(*pool));  // handed to the loop
  weft_io_test::round_trip(io);                                           // waiting in accept
  stop.request_stop();
  REQUIRE(weft_test::eventually([&] { return done.load(std::memory_order_acquire) == 1; }));
  CHECK(got == std::errc::operation_canceled);
  // The withdrawn accept's cancel reaches the kernel with the loop's next submission; a
  // client that comes before that is taken and kept for the next accept() (not lost,
  // checked below), so the count starts after one more turn of the loop.
  weft_io_test::round_trip(io);

  const std::size_t before = weft_io_test::fd_count();
  std::vector<int> clients;
  for (std::size_t i = 0; i < k_clients; ++i) {
    clients.push_back(start_connect(ep));
    REQUIRE(clients.back() >= 0);
  }
  // Two turns of the loop, in which an armed accept takes what the kernel queued.
  weft_io_test::round_trip(io);
  weft_io_test::round_trip(io);
  const std::size_t taken = weft_io_test::fd_count() - before - k_clients;
  // Nothing lost: accept() gets every client.
  std::vector<std::uint16_t> want;
  for (int fd : clients) want.push_back(local_port(fd));
  auto ports = accept_n(io, l, k_clients);
  std::sort(ports.begin(), ports.end());
  std::sort(want.begin(), want.end());
  CHECK(ports == want);
  for (int fd : clients) ::close(fd);
  return taken;
}

}  // namespace

TEST_CASE("uring: a listener whose waiting accept() was stopped takes no connection for nobody", "[io][uring]") {
  SECTION("uring_context: accept on its loop") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    CHECK(taken_after_stop(*io, *io, nullptr) == 0);
  }
  SECTION("uring_context: accept from a thread_pool") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::thread_pool pool{{.threads = 1}};
    CHECK(taken_after_stop(*io, pool, &pool) == 0);
  }
  SECTION("io_pool") {
    auto io = weft_io_test::make_io_pool_or_skip(1);
    if (!io) return;
    CHECK(taken_after_stop(*io, *io, nullptr) == 0);
  }
}

namespace {

struct accept_seen {
  std::atomic<bool> going{false};
  std::error_code ec;
  weft_io_test::completion_count done;
};

weft::task<void> accept_from_elsewhere(tcp_listener& l, accept_seen& seen) {
  auto a = l.accept();  // before the close (accept() and close() must not race)
  seen.going.store(true);
  auto [ec, s] = co_await std::move(a);
  seen.ec = ec;
  seen.done.arrive();
}

}  // namespace

TEST_CASE("uring: a listener closed on its ring while an accept() from another thread is on its way there",
          "[io][uring]") {
  // The accept() of a pool task is handed to the listener's loop; the loop, busy with a
  // task of its own, closes the listener before it takes that call (in most rounds; in
  // the others the call was taken first). The accept must end with cancelled, touching
  // no freed state (ASan), and the listener's fd must come back.
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  weft::thread_pool pool{{.threads = 1}};
  const std::size_t fds_before = weft_io_test::fd_count();
  for (int round = 0; round < 200; ++round) {
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
    accept_seen seen;
    weft::sync_wait(*io, [&]() -> weft::task<void> {
      weft::post(pool, accept_from_elsewhere(l, seen));
      while (!seen.going.load()) std::this_thread::yield();
      for (int spin = 0; spin < 2000; ++spin) std::atomic_signal_fence(std::memory_order_seq_cst);
      l.close();  // on the ring's own thread: runs here, before the queued accept
      co_return;
    }());
    REQUIRE(seen.done.wait_for(1, 5s));
    INFO("round " << round << ": " << seen.ec.message());
    CHECK(seen.ec == weft::io::error::cancelled);
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

namespace {
weft::task<void> accept_and_note(tcp_listener& l, std::error_code& ec, std::atomic<bool>& resumed) {
  auto r = co_await l.accept();
  ec = r.ec;
  resumed.store(true);
}
}  // namespace

TEST_CASE("uring: close() ends waiting accepts without running their tasks inside close()", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  std::atomic<bool> resumed{false};
  std::error_code ec;
  weft::sync_wait(*io, [&]() -> weft::task<void> {
    weft::scope<> s;
    s.spawn(accept_and_note, std::ref(l), std::ref(ec), std::ref(resumed));
    co_await weft::io::sleep_for(*io, 1ms);  // the accept is waiting now
    l.close();
    CHECK_FALSE(resumed.load());  // not run inside close()
    co_await s.join();
  }());
  CHECK(resumed.load());
  CHECK(ec == weft::io::error::cancelled);
}

namespace {

/// True when `fd` is a listening socket.
bool is_listening(int fd) {
  int on = 0;
  socklen_t len = sizeof on;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on != 0;
}

}  // namespace

// A cancel() queued to the ring from another thread runs after its stream was closed
// there and a listener took the same fd number and armed its accept: the ring's fd map
// names the listener as the fd's socket now, so the stale cancel must not end the
// listener's accept.
TEST_CASE("uring: a stale cancel() of a closed stream leaves the accept of a listener on its fd number alone",
          "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const int reused = sv[0];
  auto s = std::make_unique<tcp_stream>(*io, reused);
  // One operation on the ring, so that its fd map records the stream on that number.
  char c = 'x';
  REQUIRE(::write(sv[1], &c, 1) == 1);
  const auto first =
      weft::sync_wait(*io, [&]() -> weft::task<weft::io::io_result> { co_return co_await s->read_some(&c, 1); }());
  REQUIRE_FALSE(first.ec);

  tcp_listener l(*io);
  std::atomic<bool> queued{false};
  std::atomic<bool> took_number{false};
  std::atomic<std::uint16_t> port{0};
  std::thread canceller;
  std::thread client;
  const auto r = weft::sync_wait(*io, [&]() -> weft::task<std::pair<std::error_code, bool>> {
    // On the loop thread, which runs no queued call until this task suspends.
    canceller = std::thread([&] {
      s->cancel();  // queued to the loop: it runs after the close and the accept below
      queued.store(true, std::memory_order_release);
    });
    while (!queued.load(std::memory_order_acquire)) std::this_thread::yield();
    s->close();  // nothing in flight: the number is free at once
    if (const auto ec = l.listen(endpoint::loopback(0))) co_return std::pair{ec, false};
    took_number.store(is_listening(reused), std::memory_order_relaxed);
    port.store(l.local_endpoint().port(), std::memory_order_relaxed);
    client = std::thread([&] {
      std::this_thread::sleep_for(100ms);  // after the stale cancel ran
      const int fd = weft_io_test::connect_plain(endpoint::loopback(port.load(std::memory_order_relaxed)));
      if (fd >= 0) {
        std::this_thread::sleep_for(50ms);
        ::close(fd);
      }
    });
    auto a = co_await l.accept();  // arms the accept on the loop, then the stale cancel runs
    co_return std::pair{a.ec, a.stream.is_open()};
  }());
  canceller.join();
  if (client.joinable()) client.join();
  REQUIRE(took_number.load());  // else the case was not set up: the listener got another number
  CHECK_FALSE(r.first);         // before the fix: operation_canceled, with no client yet
  CHECK(r.second);
  ::close(sv[1]);
}

namespace {

// Accepts once: outcome 1 when cancelled, 2 when it got a connection (or another error).
weft::task<void> accept_once(tcp_listener& l, std::atomic<int>& outcome, std::atomic<bool>& called) {
  auto a = l.accept();  // the member call made: close() may come from now on
  called.store(true, std::memory_order_release);
  auto [ec, s] = co_await std::move(a);
  outcome.store(ec == std::errc::operation_canceled ? 1 : 2, std::memory_order_release);
}

}  // namespace

// The listener's socket is closed only once its ring reaped the cancelled accept's last
// CQE; a context destroyed right after the close ran waits for that CQE (bounded alike
// on both kinds: a uring_context's loop thread and an io_pool's workers) and releases
// the socket, and the pending accept ends with operation_canceled.
TEST_CASE("uring: a context destroyed right after its listener's close() releases the socket", "[io][uring]") {
  for (const bool pool : {false, true}) {
    INFO((pool ? "io_pool" : "uring_context"));
    const std::size_t fds_before = weft_io_test::fd_count();
    std::atomic<int> outcome{0};
    {
      std::unique_ptr<weft::io::uring_context> io;
      if (pool) {
        io = weft_io_test::make_io_pool_or_skip(2);
      } else {
        io = weft_io_test::make_uring_or_skip();
      }
      if (!io) return;
      auto l = std::make_unique<tcp_listener>(*io, 0);
      REQUIRE_FALSE(l->listen(endpoint::loopback(0)));
      weft::executor& ex = pool ? static_cast<weft::executor&>(static_cast<weft::io::io_pool&>(*io).pool()) : *io;
      std::atomic<bool> called{false};
      weft::post(ex, accept_once(*l, outcome, called));
      // The accept is armed once a client was taken (multishot: it stays armed).
      const int client = weft_io_test::connect_plain(l->local_endpoint());
      REQUIRE(client >= 0);
      REQUIRE(weft_test::eventually([&] { return outcome.load(std::memory_order_acquire) == 2; }));
      ::close(client);
      outcome.store(0);
      called.store(false);
      weft::post(ex, accept_once(*l, outcome, called));
      REQUIRE(weft_test::eventually([&] { return called.load(std::memory_order_acquire); }));
      l->close();  // from this thread: handed to the ring, where the second accept waits
      l.reset();
      // The close ran on the ring once the accept it ended reports; the context goes at
      // once then, while the ring may still have the cancelled accept's CQE to reap.
      CHECK(weft_test::eventually([&] { return outcome.load(std::memory_order_acquire) != 0; }));
      io.reset();
    }
    CHECK(outcome.load(std::memory_order_acquire) == 1);
    CHECK(weft_io_test::fd_count() == fds_before);
  }
}

namespace {
weft::task<std::error_code> accept_error(tcp_listener& l) {
  auto [ec, s] = co_await l.accept();
  co_return ec;
}

// As io/README.md's accept loop with a back-off: any error but operation_canceled is
// retried after a pause. Counts the errors; ends when an accept says the listener is closed.
weft::task<int> backing_off_loop(weft::io::uring_context& io, tcp_listener& l, std::atomic<int>& in_backoff) {
  int errors = 0;
  for (;;) {
    auto [ec, s] = co_await l.accept();
    if (ec == std::errc::operation_canceled) co_return errors;
    if (++errors > 5) co_return errors;  // a loop that would never end: the check below fails
    in_backoff.store(1);
    co_await weft::io::sleep_for(io, 50ms);
  }
}
}  // namespace

TEST_CASE("uring: accept() before listen() is bad_file_descriptor; after close(), operation_canceled", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  CHECK(weft::sync_wait(*io, accept_error(l)) == std::errc::bad_file_descriptor);  // never listened
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  l.close();
  CHECK(weft::sync_wait(*io, accept_error(l)) == std::errc::operation_canceled);
  CHECK(weft::sync_wait(*io, accept_error(l)) == weft::io::error::cancelled);  // every time
  // Listening again: accepts work again.
  REQUIRE_FALSE(l.listen(endpoint::loopback(0)));
  const int fd = start_connect(l.local_endpoint());
  REQUIRE(fd >= 0);
  CHECK_FALSE(weft::sync_wait(*io, accept_error(l)));
  ::close(fd);
  l.close();
  // Moved after close: the new listener says closed too, and the old one is not listening.
  tcp_listener moved(std::move(l));
  CHECK(weft::sync_wait(*io, accept_error(moved)) == std::errc::operation_canceled);
}

TEST_CASE("uring: a close() during an accept loop's back-off ends the loop", "[io][uring]") {
  auto io = weft_io_test::make_uring_or_skip();
  if (!io) return;
  tcp_listener l(*io);
  // The loop's first accept fails (not listening yet: bad_file_descriptor) and it backs
  // off; the listener listens and is closed while it sleeps: its next accept must end it.
  std::atomic<int> in_backoff{0};
  auto loop = weft::spawn(backing_off_loop(*io, l, in_backoff)).run_on(*io).fork();
  REQUIRE(weft_test::eventually([&] { return in_backoff.load() == 1; }));  // bad_file_descriptor, backing off
  weft::sync_wait(*io, [](tcp_listener& x) -> weft::task<void> {
    (void)x.listen(endpoint::loopback(0));
    x.close();  // before the loop's next accept
    co_return;
  }(l));
  const int errors = weft::sync_wait(*io, [](auto& h) -> weft::task<int> { co_return co_await h; }(loop));
  CHECK(errors == 1);
}
