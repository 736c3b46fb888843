// io_udp_st: UDP ping-pong on loopback (bench/README.md). A single-thread server and a
// single-thread client; --size datagrams of 64 bytes in total (default 100,000), spread
// over 20 client sockets. Each client socket sends a datagram that names it and its
// sequence number and waits for the echo before the next; the server sends every
// datagram back to its source. The answer is the number of datagrams, counted by the
// server (received) and by the clients (echoes received whose bytes match what they
// sent): both must equal --size. --threads is ignored.
//
// Flavors: asio (plain Asio C++20 coroutines: awaitable + co_spawn, no weft; the peer),
// weft-uring (weft tasks on two weft::io::uring_context, weft::io::udp_socket).
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include "common/driver.hpp"

namespace {

constexpr std::uint64_t k_sockets = 20;
constexpr std::size_t k_datagram = 64;

struct answer {
  std::uint64_t served = 0;    // datagrams the server received
  std::uint64_t answered = 0;  // echoes the clients received intact
};

std::uint64_t share(std::uint64_t total, std::uint64_t i) {
  return total / k_sockets + (i < total % k_sockets ? 1 : 0);
}

/// The datagram of socket `id`, number `seq`: 64 bytes that only that pair produces.
void fill(char* out, std::uint64_t id, std::uint64_t seq) {
  for (std::size_t i = 0; i < k_datagram; ++i) out[i] = static_cast<char>((id * 131 + seq * 7 + i) & 0xff);
  std::memcpy(out, &id, sizeof id);
  std::memcpy(out + sizeof id, &seq, sizeof seq);
}

// ---- asio: plain Asio C++20 coroutines, the peer ----------------------------------------------

using asio::ip::udp;
constexpr auto k_as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

struct asio_threads {
  asio::io_context server{1}, client{1};
  asio::executor_work_guard<asio::io_context::executor_type> g1{server.get_executor()}, g2{client.get_executor()};
  std::thread t1{[this] { server.run(); }}, t2{[this] { client.run(); }};
  ~asio_threads() {
    g1.reset();
    g2.reset();
    t1.join();
    t2.join();
  }
};

asio::awaitable<std::uint64_t> asio_server(udp::socket& s, std::uint64_t total) {
  char buf[2048];
  std::uint64_t served = 0;
  udp::endpoint from;
  while (served < total) {
    auto [ec, n] = co_await s.async_receive_from(asio::buffer(buf), from, k_as_tuple);
    if (ec) break;
    ++served;
    auto [ec2, m] = co_await s.async_send_to(asio::buffer(buf, n), from, k_as_tuple);
    if (ec2) break;
  }
  co_return served;
}

asio::awaitable<void> asio_client_socket(udp::endpoint server, std::uint64_t id, std::uint64_t count,
                                         std::uint64_t& answered, std::uint64_t& open) {
  udp::socket s(co_await asio::this_coro::executor, udp::endpoint(asio::ip::address_v4::loopback(), 0));
  char out[k_datagram], in[2048];
  for (std::uint64_t k = 0; k < count; ++k) {
    fill(out, id, k);
    auto [ec, n] = co_await s.async_send_to(asio::buffer(out), server, k_as_tuple);
    if (ec) break;
    auto [ec2, m] = co_await s.async_receive(asio::buffer(in), k_as_tuple);
    if (ec2) break;
    if (m == k_datagram && std::memcmp(in, out, k_datagram) == 0) ++answered;
  }
  --open;
}

asio::awaitable<std::uint64_t> asio_client(udp::endpoint server, std::uint64_t total) {
  auto ex = co_await asio::this_coro::executor;
  std::uint64_t answered = 0, open = k_sockets;
  for (std::uint64_t i = 0; i < k_sockets; ++i)
    asio::co_spawn(ex, asio_client_socket(server, i, share(total, i), answered, open), asio::detached);
  asio::steady_timer tick(ex);
  while (open != 0) {  // same thread as the sockets' coroutines: no race
    tick.expires_after(std::chrono::microseconds(100));
    co_await tick.async_wait(k_as_tuple);
  }
  co_return answered;
}

answer run_asio(int, std::uint64_t total) {
  static asio_threads t;
  udp::socket s(t.server, udp::endpoint(asio::ip::address_v4::loopback(), 0));
  const udp::endpoint ep = s.local_endpoint();
  auto served = asio::co_spawn(t.server, asio_server(s, total), asio::use_future);
  auto answered = asio::co_spawn(t.client, asio_client(ep, total), asio::use_future);
  answer a{served.get(), answered.get()};
  asio::post(t.server, asio::use_future([&] { s.close(); })).get();
  return a;
}

// ---- weft-uring: weft tasks over the io_uring backend --------------------------------------

weft::task<std::uint64_t> uring_server(weft::io::udp_socket& s, std::uint64_t total) {
  char buf[2048];
  std::uint64_t served = 0;
  while (served < total) {
    auto r = co_await s.receive_from(buf, sizeof buf);
    if (r.ec) break;
    ++served;
    auto w = co_await s.send_to(buf, r.n, r.from);
    if (w.ec) break;
  }
  co_return served;
}

weft::task<std::uint64_t> uring_client_socket(weft::io::uring_context& io, weft::io::endpoint server, std::uint64_t id,
                                              std::uint64_t count) {
  weft::io::udp_socket s(io);
  if (s.bind(weft::io::endpoint::loopback(0)) || s.connect(server)) co_return 0;
  char out[k_datagram], in[2048];
  std::uint64_t answered = 0;
  for (std::uint64_t k = 0; k < count; ++k) {
    fill(out, id, k);
    auto w = co_await s.send(out, sizeof out);
    if (w.ec) break;
    auto r = co_await s.receive(in, sizeof in);
    if (r.ec) break;
    if (r.n == k_datagram && std::memcmp(in, out, k_datagram) == 0) ++answered;
  }
  co_return answered;
}

weft::task<std::uint64_t> uring_client(weft::io::uring_context& io, weft::io::endpoint server, std::uint64_t total) {
  std::vector<weft::task<std::uint64_t>> socks;
  for (std::uint64_t i = 0; i < k_sockets; ++i) socks.push_back(uring_client_socket(io, server, i, share(total, i)));
  std::uint64_t answered = 0;
  for (std::uint64_t n : co_await weft::spawn_many(std::move(socks))) answered += n;
  co_return answered;
}

weft::task<void> deliver(weft::task<std::uint64_t> t, std::promise<std::uint64_t>& out) { out.set_value(co_await t); }

answer run_weft_uring(int, std::uint64_t total) {
  static weft::io::uring_context server, client;  // throws uring_unavailable where io_uring is blocked
  weft::io::udp_socket s(server);
  if (auto ec = s.bind(weft::io::endpoint::loopback(0))) throw std::system_error(ec, "bind");
  const weft::io::endpoint ep = s.local_endpoint();
  std::promise<std::uint64_t> served;
  weft::post(server, deliver(uring_server(s, total), served));
  const std::uint64_t answered = weft::sync_wait(client, uring_client(client, ep, total));
  return {served.get_future().get(), answered};
}

const weft_bench::workload<answer> k_io_udp_st{
    .name = "io_udp_st",
    .size_meaning = "64-byte datagrams in total, over 20 client sockets",
    .default_size = 100'000,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 1'000'000'000; },
    .check =
        [](std::uint64_t n, const answer& a) {
          if (a.served != n)
            return weft_bench::verdict{
                false, a.served,
                "server received " + std::to_string(a.served) + " datagrams, expected " + std::to_string(n)};
          return weft_bench::expect_equal(a.answered, n);
        },
    .flavors =
        {
            {"asio", run_asio},
            {"weft-uring", run_weft_uring},
        },
};

}  // namespace

int main(int argc, char** argv) { return weft_bench::run(argc, argv, k_io_udp_st); }
