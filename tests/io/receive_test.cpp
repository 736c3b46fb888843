// receive(): leased buffers from a ring's pool (weft/io/buffer.hpp), over both pool kinds:
// a provided buffer ring (the kernel picks the buffer) and the forced fallback (poll,
// then a buffer taken by the loop).
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::leased_buffer;
using weft::io::receive_result;
using weft::io::tcp_listener;
using weft::io::tcp_stream;
using weft::io::uring_context;
using weft::io::uring_options;
using weft_io_test::connect_plain;
using weft_io_test::run;

namespace {

// A server stream of `io` and the plain blocking client socket at its other end.
struct connection {
  tcp_stream server;
  int client = -1;
  ~connection() {
    if (client >= 0) ::close(client);
  }
};

std::unique_ptr<connection> connect_to(uring_context& io, tcp_listener& l) {
  const int fd = connect_plain(l.local_endpoint());
  REQUIRE(fd >= 0);
  auto [ec, s] = weft::sync_wait(io, run(l.accept()));
  REQUIRE_FALSE(ec);
  auto c = std::unique_ptr<connection>(new connection{std::move(s), fd});
  return c;
}

// Sends every byte; false on an error. Safe on any thread: Catch's assertions are not,
// so threads other than the test's own report through the result.
[[nodiscard]] bool send_all_plain(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// For the test's own thread only.
void send_plain(int fd, std::string_view bytes) { REQUIRE(send_all_plain(fd, bytes)); }

receive_result receive_now(uring_context& io, tcp_stream& s) { return weft::sync_wait(io, run(s.receive())); }

uring_options pool_options(bool provided, unsigned count, unsigned size = 4096) {
  uring_options o;
  o.provided_buffers = provided;
  o.buffer_count = count;
  o.buffer_size = size;
  return o;
}

}  // namespace

TEST_CASE("receive: the bytes arrive in leased buffers, in order, then eof", "[io][receive]") {
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 8, 1024));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  auto c = connect_to(*io, l);
  std::string sent;
  for (int i = 0; sent.size() < 200'000; ++i) sent += "record " + std::to_string(i) + ";";
  std::atomic<bool> send_failed{false};
  std::thread writer([&] {
    for (std::size_t at = 0; at < sent.size(); at += 3000) {
      if (!send_all_plain(c->client, std::string_view(sent).substr(at, 3000))) send_failed = true;
      if (at % 30000 == 0) std::this_thread::sleep_for(1ms);  // some receives find nothing waiting
    }
    ::shutdown(c->client, SHUT_WR);
  });
  std::string got;
  std::size_t receives = 0, largest = 0;
  for (;;) {
    auto [ec, buf] = receive_now(*io, c->server);
    if (ec) {
      CHECK(ec == weft::io::error::eof);
      CHECK(buf.empty());
      break;
    }
    REQUIRE_FALSE(buf.empty());
    ++receives;
    largest = std::max(largest, buf.size());
    got.append(buf.chars());
  }
  writer.join();
  CHECK_FALSE(send_failed);
  CHECK(got == sent);
  CHECK(largest <= 1024);
  CHECK(receives >= sent.size() / 1024);
  CHECK(receive_now(*io, c->server).ec == weft::io::error::eof);  // and again
}

TEST_CASE("receive: a waiting receive holds no buffer", "[io][receive]") {
  // 32 receives wait at once on a pool of 4 buffers; the clients then write one by one,
  // and every receive gets its byte.
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 4));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  std::vector<std::unique_ptr<connection>> conns;
  for (int i = 0; i < 32; ++i) conns.push_back(connect_to(*io, l));
  const int ok =
      weft::sync_wait(*io, [](uring_context& ctx, std::vector<std::unique_ptr<connection>>& cs) -> weft::task<int> {
        weft::scope<int> sc;
        for (auto& c : cs) {
          sc.spawn([](tcp_stream& s) -> weft::task<int> {
            auto r = co_await s.receive();
            co_return !r.ec && r.buf.size() == 1 && r.buf.chars() == "x" ? 1 : 0;
          }(c->server));
        }
        co_await weft::io::sleep_for(ctx, 20ms);  // all of them waiting
        int good = 0;
        for (auto& c : cs) {
          send_plain(c->client, "x");
          auto v = co_await sc.next();  // that one's receive, before the next client writes
          good += v ? *v : 0;
        }
        co_await sc.join();
        co_return good;
      }(*io, conns));
  CHECK(ok == 32);
}

TEST_CASE("receive: with every buffer leased, no_buffer_space, and no byte is lost", "[io][receive]") {
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 2));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  auto c = connect_to(*io, l);
  send_plain(c->client, "a");
  auto first = receive_now(*io, c->server);
  REQUIRE_FALSE(first.ec);
  send_plain(c->client, "b");
  auto second = receive_now(*io, c->server);
  REQUIRE_FALSE(second.ec);
  CHECK(first.buf.chars() == "a");
  CHECK(second.buf.chars() == "b");

  send_plain(c->client, "cdef");
  auto none = receive_now(*io, c->server);
  CHECK(none.ec == std::errc::no_buffer_space);
  CHECK(none.buf.empty());

  SECTION("given back on the ring's thread") {
    weft::sync_wait(*io, [](leased_buffer b) -> weft::task<void> {
      b.reset();
      co_return;
    }(std::move(first.buf)));
  }
  SECTION("given back on another thread") {
    std::thread([b = std::move(first.buf)]() mutable { b.reset(); }).join();
  }
  auto later = receive_now(*io, c->server);
  REQUIRE_FALSE(later.ec);
  CHECK(later.buf.chars() == "cdef");
}

TEST_CASE("receive: the pool uses few buffers until more receives hold one at once", "[io][receive]") {
  // 1,024 buffers: receives that give their buffer back before the next one cycle through
  // a few of them only (the rest never become resident); 1,024 leases held at once get
  // 1,024 buffers (the kernel's ring is topped up from the pool as it runs dry), then
  // no_buffer_space, and the bytes wait.
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 1024, 64));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  auto c = connect_to(*io, l);
  std::set<const std::byte*> used;
  for (int i = 0; i < 500; ++i) {
    send_plain(c->client, "x");
    auto r = receive_now(*io, c->server);
    REQUIRE_FALSE(r.ec);
    REQUIRE(r.buf.chars() == "x");
    used.insert(r.buf.data());
  }
  CHECK(used.size() <= 16);

  std::vector<leased_buffer> held;
  std::set<const std::byte*> distinct;
  for (std::size_t i = 0; i < 1024; ++i) {
    const std::string m(1, static_cast<char>('a' + i % 26));
    send_plain(c->client, m);
    auto r = receive_now(*io, c->server);
    REQUIRE_FALSE(r.ec);
    REQUIRE(r.buf.chars() == m);
    distinct.insert(r.buf.data());
    held.push_back(std::move(r.buf));
  }
  CHECK(distinct.size() == 1024);
  send_plain(c->client, "waits");
  auto none = receive_now(*io, c->server);
  CHECK(none.ec == std::errc::no_buffer_space);
  held.erase(held.begin(), held.begin() + 300);  // some back
  auto later = receive_now(*io, c->server);
  REQUIRE_FALSE(later.ec);
  CHECK(later.buf.chars() == "waits");
}

TEST_CASE("receive: a lease outlives its stream and its context", "[io][receive]") {
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  leased_buffer kept;
  {
    auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 4));
    if (!io) return;
    tcp_listener l(*io);
    REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
    auto c = connect_to(*io, l);
    send_plain(c->client, "still here");
    auto r = receive_now(*io, c->server);
    REQUIRE_FALSE(r.ec);
    kept = std::move(r.buf);
    CHECK(r.buf.empty());  // moved from
    c.reset();             // the stream goes
    CHECK(kept.chars() == "still here");
  }  // the context goes
  CHECK(kept.chars() == "still here");
  std::memcpy(kept.data(), "STILL", 5);  // still the holder's memory (ASan: not freed)
  CHECK(kept.chars() == "STILL here");
  kept.reset();
  CHECK(kept.empty());
  CHECK(kept.size() == 0);
}

TEST_CASE("receive: closed, never opened, reset, timed out, stopped", "[io][receive]") {
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 4));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));

  tcp_stream never(*io);
  CHECK(receive_now(*io, never).ec == std::errc::bad_file_descriptor);

  auto c = connect_to(*io, l);
  const auto timed = weft::sync_wait(*io, run(weft::io::with_timeout(c->server.receive(), 20ms)));
  CHECK(timed.ec == weft::io::error::timed_out);
  CHECK(timed.buf.empty());

  const auto stopped = weft::sync_wait(*io, [](uring_context& ctx, tcp_stream& s) -> weft::task<std::error_code> {
    weft::scope<receive_result> sc;
    sc.spawn(run(s.receive()));
    co_await weft::io::sleep_for(ctx, 10ms);
    sc.request_stop();
    auto v = co_await sc.next();
    co_await sc.join();
    co_return v ? v->ec : std::error_code{};
  }(*io, c->server));
  CHECK(stopped == std::errc::operation_canceled);

  // Closed while waiting, then after.
  const auto closed = weft::sync_wait(*io, [](uring_context& ctx, tcp_stream& s) -> weft::task<std::error_code> {
    weft::scope<receive_result> sc;
    sc.spawn(run(s.receive()));
    co_await weft::io::sleep_for(ctx, 10ms);
    s.close();
    auto v = co_await sc.next();
    co_await sc.join();
    co_return v ? v->ec : std::error_code{};
  }(*io, c->server));
  CHECK(closed == weft::io::error::cancelled);
  CHECK(receive_now(*io, c->server).ec == weft::io::error::cancelled);

  // The peer resets the connection.
  auto d = connect_to(*io, l);
  linger hard{.l_onoff = 1, .l_linger = 0};
  REQUIRE(::setsockopt(d->client, SOL_SOCKET, SO_LINGER, &hard, sizeof hard) == 0);
  ::close(std::exchange(d->client, -1));
  CHECK(receive_now(*io, d->server).ec == std::errc::connection_reset);
}

TEST_CASE("receive: two receives on one socket, under time limits", "[io][receive]") {
  // Both wake for the first bytes (the fallback's poll) and one finds nothing left: it
  // waits again, its time limit still counted once.
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  auto io = weft_io_test::make_uring_or_skip(pool_options(provided, 4));
  if (!io) return;
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));
  auto c = connect_to(*io, l);
  const std::string both = weft::sync_wait(*io, [](uring_context& ctx, connection& cn) -> weft::task<std::string> {
    weft::scope<receive_result> sc;
    for (int i = 0; i < 2; ++i) sc.spawn(run(weft::io::with_timeout(cn.server.receive(), 5s)));
    co_await weft::io::sleep_for(ctx, 10ms);
    std::string got;
    send_plain(cn.client, "1");
    if (auto v = co_await sc.next(); v && !v->ec) got.append(v->buf.chars());
    co_await weft::io::sleep_for(ctx, 10ms);
    send_plain(cn.client, "2");
    if (auto v = co_await sc.next(); v && !v->ec) got.append(v->buf.chars());
    co_await sc.join();
    co_return got;
  }(*io, *c));
  CHECK(both == "12");
  // And the time limit still holds for a receive that waits again.
  const auto timed = weft::sync_wait(*io, run(weft::io::with_timeout(c->server.receive(), 20ms)));
  CHECK(timed.ec == weft::io::error::timed_out);
}

TEST_CASE("receive: bad pool options are refused at construction", "[io][receive]") {
  for (const auto& [count, size] : std::vector<std::pair<unsigned, unsigned>>{
           {0, 4096}, {32769, 4096}, {1024, 0}, {1024, 63}, {16, (1U << 24) + 1}, {32768, 1U << 18}}) {
    INFO(count << " buffers of " << size << " bytes");
    uring_options o;
    o.buffer_count = count;
    o.buffer_size = size;
    CHECK_THROWS_AS(uring_context(o), std::invalid_argument);
    CHECK_THROWS_AS(weft::io::io_pool({.threads = 1}, o), std::invalid_argument);
  }
  uring_options fine;
  fine.buffer_count = 1;
  fine.buffer_size = 64;
  CHECK_NOTHROW(weft_io_test::make_uring_or_skip(fine));
}

TEST_CASE("receive: an io_pool server gives its leases to another thread", "[io][receive]") {
  // Each worker's connections lease from that worker's pool (8 buffers); a consumer
  // thread checks and drops every lease, so buffers go back from another thread all the
  // time, and the pools run dry now and then (the server then waits and receives again).
  const bool provided = GENERATE(true, false);
  INFO("provided buffer ring: " << provided);
  std::unique_ptr<weft::io::io_pool> io;
  try {
    io = std::make_unique<weft::io::io_pool>(weft::pool_options{.threads = 2},
                                             weft_io_test::test_ring_options(pool_options(provided, 8, 256)));
  } catch (const weft::io::uring_unavailable& e) {
    WARN("SKIPPED (io_uring unavailable): " << e.what());
    return;
  }
  tcp_listener l(*io);
  REQUIRE_FALSE(l.listen(weft::io::endpoint::loopback(0)));

  struct handoff {
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::pair<int, leased_buffer>> q;
    bool done = false;
  } h;
  constexpr int k_conns = 8;
  constexpr std::size_t k_bytes = 60'000;
  std::vector<std::string> got(k_conns);
  std::thread consumer([&] {
    std::unique_lock lock(h.m);
    for (;;) {
      h.cv.wait(lock, [&] { return !h.q.empty() || h.done; });
      if (h.q.empty()) return;
      auto [id, buf] = std::move(h.q.front());
      h.q.pop_front();
      lock.unlock();
      got[static_cast<std::size_t>(id)].append(buf.chars());
      buf.reset();  // back to its worker's pool, from here
      lock.lock();
    }
  });

  std::vector<std::thread> clients;
  std::atomic<int> client_failures{0};  // checked after the join: no Catch off this thread
  for (int i = 0; i < k_conns; ++i) {
    clients.emplace_back([&, i] {
      const int fd = connect_plain(l.local_endpoint());
      if (fd < 0) {
        client_failures.fetch_add(1);
        return;
      }
      const std::string id = std::to_string(i);
      const std::string m = id + "0123456789abcdef";
      const std::string first(1, static_cast<char>('A' + i));
      bool ok = send_all_plain(fd, first);
      for (std::size_t sent = 0; ok && sent < k_bytes; sent += m.size()) ok = send_all_plain(fd, m);
      if (!ok) client_failures.fetch_add(1);
      ::close(fd);
    });
  }
  std::atomic<int> full_pool{0};
  weft::sync_wait(
      *io, [](weft::io::io_pool& pool, tcp_listener& lis, handoff& hd, std::atomic<int>& dry) -> weft::task<void> {
        weft::scope<> conns;
        for (int i = 0; i < k_conns; ++i) {
          auto [ec, s] = co_await lis.accept();
          if (ec) break;
          conns.spawn(
              [](weft::io::io_pool& p, tcp_stream st, handoff& hd2, std::atomic<int>& dry2) -> weft::task<void> {
                int id = -1;  // from the first byte
                for (;;) {
                  auto [rec, buf] = co_await st.receive();
                  if (rec == std::errc::no_buffer_space) {
                    dry2.fetch_add(1, std::memory_order_relaxed);
                    co_await weft::io::sleep_for(p, 1ms);
                    continue;
                  }
                  if (rec) co_return;
                  if (id < 0) {
                    id = static_cast<char>(buf.chars()[0]) - 'A';
                    if (buf.size() == 1) continue;  // the lease goes back here, on its worker
                  }
                  std::lock_guard lock(hd2.m);
                  hd2.q.emplace_back(id, std::move(buf));
                  hd2.cv.notify_one();
                }
              }(pool, std::move(s), hd, dry));
        }
        co_await conns.join();
      }(*io, l, h, full_pool));
  for (auto& t : clients) t.join();
  CHECK(client_failures.load() == 0);
  {
    std::lock_guard lock(h.m);
    h.done = true;
    h.cv.notify_one();
  }
  consumer.join();
  for (int i = 0; i < k_conns; ++i) {
    INFO("connection " << i);
    const std::string m = std::to_string(i) + "0123456789abcdef";
    std::string want;
    for (std::size_t sent = 0; sent < k_bytes; sent += m.size()) want += m;
    // The first byte's buffer went along when it carried the first records too.
    const std::string& g = got[static_cast<std::size_t>(i)];
    CHECK((g == want || g == static_cast<char>('A' + i) + want));
  }
  WARN("receives that found every buffer leased: " << full_pool.load());
}
