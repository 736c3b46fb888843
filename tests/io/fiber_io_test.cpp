// Fibers meet the other layers: blocking-style fiber code awaiting channel operations
// (with tasks on the other side) and socket operations on both I/O backends.
// Catch2 asserts only on the test thread: code on other threads throws instead, and the
// exception reaches the test through sync_wait.
#include <weft/channel.hpp>
#include <weft/fiber.hpp>
#include <weft/io/io.hpp>
#include <weft/pool.hpp>
#include <weft/spawn.hpp>
#include <weft/spawn_many.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <catch2/catch.hpp>

#include <asio.hpp>

#include "io_support.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace {

template <class T>
weft::task<T> join(weft::fiber_handle<T> h) {
  co_return co_await h;
}

weft::task<std::uint64_t> task_consumer(weft::channel<std::uint64_t>& ch) {
  std::uint64_t sum = 0;
  while (auto v = co_await ch.pull()) sum += *v;
  co_return sum;
}

weft::task<void> task_producer(weft::channel<std::uint64_t>& ch, std::uint64_t first, std::uint64_t last) {
  for (std::uint64_t v = first; v < last; ++v)
    if (!co_await ch.push(v)) throw std::logic_error("push after close");
}

}  // namespace

TEST_CASE("fibers push into and pull from a bounded channel, tasks on the other side", "[fiber][channel]") {
  weft::thread_pool pool{{.threads = 2}};
  constexpr std::uint64_t k_per_producer = 20'000, k_producers = 4;
  constexpr std::uint64_t k_total = k_per_producer * k_producers;

  SECTION("fiber producers, task consumers") {
    weft::channel<std::uint64_t> ch{8};  // small: producers really suspend on a full channel
    auto body = [&]() -> weft::task<std::uint64_t> {
      std::vector<weft::fiber_handle<void>> producers;
      for (std::uint64_t p = 0; p < k_producers; ++p) {
        producers.push_back(weft::spawn_fiber([&ch, p] {
          for (std::uint64_t v = p * k_per_producer; v < (p + 1) * k_per_producer; ++v)
            if (!weft::await(ch.push(v))) throw std::logic_error("push after close");
        }));
      }
      auto c1 = weft::spawn(task_consumer(ch)).fork();
      auto c2 = weft::spawn(task_consumer(ch)).fork();
      for (auto& h : producers) co_await h;
      ch.close();
      const std::uint64_t s1 = co_await c1;
      co_return s1 + co_await c2;
    };
    CHECK(weft::sync_wait(pool, body()) == k_total * (k_total - 1) / 2);
  }

  SECTION("task producers, fiber consumers") {
    weft::channel<std::uint64_t> ch{8};
    std::vector<weft::fiber_handle<std::uint64_t>> consumers;
    for (int c = 0; c < 2; ++c) {
      consumers.push_back(weft::spawn_fiber(
          [&ch] {
            std::uint64_t sum = 0;
            while (auto v = weft::await(ch.pull())) sum += *v;
            return sum;
          },
          {.executor = &pool}));
    }
    auto produce = [&]() -> weft::task<void> {
      std::vector<weft::task<void>> ps;
      for (std::uint64_t p = 0; p < k_producers; ++p)
        ps.push_back(task_producer(ch, p * k_per_producer, (p + 1) * k_per_producer));
      co_await weft::spawn_many(std::move(ps));
      ch.close();
    };
    weft::sync_wait(pool, produce());
    std::uint64_t sum = 0;
    for (auto& h : consumers) sum += weft::sync_wait(pool, join(std::move(h)));
    CHECK(sum == k_total * (k_total - 1) / 2);
  }
}

TEST_CASE("a fiber on the pool talks to an io_uring echo server in blocking style", "[fiber][uring]") {
  const std::size_t fds_before = weft_io_test::fd_count();
  {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::thread_pool pool{{.threads = 2}};
    weft::io::tcp_listener listener{*io};
    REQUIRE_FALSE(listener.listen(weft::io::endpoint::loopback(0)));
    const std::uint16_t port = listener.local_endpoint().port();

    // The server: one connection, echo until EOF (a task on the uring loop).
    auto serve = [&]() -> weft::task<std::size_t> {
      auto [ec, s] = co_await listener.accept();
      if (ec) throw std::system_error(ec);
      std::size_t echoed = 0;
      char buf[256];
      for (;;) {
        auto r = co_await s.read_some(buf, sizeof buf);
        if (r.ec || r.n == 0) break;
        auto w = co_await s.write_all(buf, r.n);
        if (w.ec) throw std::system_error(w.ec);
        echoed += r.n;
      }
      co_return echoed;
    };
    auto server = weft::spawn_fiber([&] { return weft::await(serve()); }, {.executor = io.get()});

    // The client: plain sequential code on a pool fiber; every await may move it.
    constexpr int k_messages = 200;
    auto client = weft::spawn_fiber(
        [&] {
          weft::io::tcp_stream s{*io};
          if (auto ec = weft::await(s.connect("127.0.0.1", port))) throw std::system_error(ec);
          int ok = 0;
          for (int i = 0; i < k_messages; ++i) {
            char out[weft_io_test::k_message], in[weft_io_test::k_message];
            weft_io_test::fill_message(out, 7, static_cast<std::uint32_t>(i));
            if (weft::await(s.write_all(out, sizeof out)).ec) break;
            std::size_t got = 0;
            while (got < sizeof in) {
              auto r = weft::await(s.read_some(in + got, sizeof in - got));
              if (r.ec || r.n == 0) throw std::runtime_error("echo ended early");
              got += r.n;
            }
            if (std::memcmp(in, out, sizeof in) == 0 && pool.owns_current_thread()) ++ok;
          }
          s.shutdown(SHUT_WR);
          return ok;
        },
        {.executor = &pool});
    CHECK(weft::sync_wait(pool, join(std::move(client))) == k_messages);
    CHECK(weft::sync_wait(*io, join(std::move(server))) == k_messages * weft_io_test::k_message);
    listener.close();
  }
  CHECK(weft_io_test::fd_count() == fds_before);
}

TEST_CASE("a fiber reads and writes an Asio socket through use_task", "[fiber][asio]") {
  weft::io::asio_executor ex;
  weft::thread_pool pool{{.threads = 2}};
  asio::ip::tcp::acceptor acceptor{ex.context(), {asio::ip::make_address("127.0.0.1"), 0}};
  const auto port = acceptor.local_endpoint().port();

  auto serve = [&]() -> weft::task<std::size_t> {
    auto [ec, s] = co_await acceptor.async_accept(weft::io::use_task);
    if (ec) throw std::system_error(ec);
    std::size_t echoed = 0;
    char buf[256];
    for (;;) {
      auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), weft::io::use_task);
      if (rec) break;
      auto [wec, m] = co_await asio::async_write(s, asio::buffer(buf, n), weft::io::use_task);
      if (wec) throw std::system_error(wec);
      echoed += m;
    }
    co_return echoed;
  };
  auto server = weft::spawn_fiber([&] { return weft::await(serve()); }, {.executor = &ex});

  constexpr int k_messages = 100;
  auto client = weft::spawn_fiber(
      [&] {
        asio::ip::tcp::socket s{ex.context()};
        const std::error_code cec =
            weft::await(s.async_connect({asio::ip::make_address("127.0.0.1"), port}, weft::io::use_task));
        if (cec) throw std::system_error(cec);
        int ok = 0;
        for (int i = 0; i < k_messages; ++i) {
          const std::string msg = "message " + std::to_string(i);
          auto [wec, wn] = weft::await(asio::async_write(s, asio::buffer(msg), weft::io::use_task));
          if (wec) break;
          std::string in(msg.size(), '\0');
          auto [rec, rn] = weft::await(asio::async_read(s, asio::buffer(in), weft::io::use_task));
          if (!rec && rn == msg.size() && in == msg && pool.owns_current_thread()) ++ok;
        }
        s.shutdown(asio::ip::tcp::socket::shutdown_send);
        return ok;
      },
      {.executor = &pool});
  CHECK(weft::sync_wait(pool, join(std::move(client))) == k_messages);
  CHECK(weft::sync_wait(ex, join(std::move(server))) > 0);
}
