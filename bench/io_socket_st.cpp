// io_socket_st: TCP ping-pong on loopback (bench/README.md). A single-thread server and a
// single-thread client; --size requests in total (default 100,000), spread over
// --connections connections (default 20; an option of this binary only). Each client
// connection writes a request and reads the whole response before the next request;
// the server answers every complete request it reads. The answer is the number of
// requests, counted by the server (requests read) and by the clients (responses read):
// both must equal --size. --threads is ignored: the workload always uses one server
// thread and one client thread.
//
// Flavors: asio (plain Asio C++20 coroutines: awaitable + co_spawn, no weft; the peer),
// weft-asio (weft tasks on two weft::io::asio_executor, use_task), weft-uring (weft
// tasks on two weft::io::uring_context, tcp_listener/tcp_stream).
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include "common/driver.hpp"

namespace {

using asio::ip::tcp;

constexpr std::string_view k_request = "GET /ping HTTP/1.1\r\nHost: weft-bench\r\nConnection: keep-alive\r\n\r\n";
constexpr std::string_view k_response = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Type: text/plain\r\n\r\npong";
constexpr std::size_t k_buffer = 4096;

std::uint64_t g_connections = 20;

struct answer {
  std::uint64_t served = 0;    // requests the server read
  std::uint64_t answered = 0;  // responses the clients read
};

/// Requests of client connection i (the remainder goes to the first ones).
std::uint64_t share(std::uint64_t total, std::uint64_t i) {
  return total / g_connections + (i < total % g_connections ? 1 : 0);
}

/// The server's bookkeeping of one connection: bytes of an incomplete request carried
/// over, and how many complete requests `n` new bytes finish.
struct request_counter {
  std::size_t partial = 0;
  std::size_t feed(std::size_t n) {
    partial += n;
    const std::size_t k = partial / k_request.size();
    partial %= k_request.size();
    return k;
  }
};

/// The response repeated k times, for a read that finished k requests (k is 1 in a
/// ping-pong; more only if the kernel ever merges two requests, which it cannot here).
std::string_view responses(std::size_t k, std::string& scratch) {
  if (k == 1) return k_response;
  scratch.clear();
  for (std::size_t i = 0; i < k; ++i) scratch += k_response;
  return scratch;
}

// ---- asio: plain Asio C++20 coroutines, the peer ----------------------------------------------

constexpr auto k_as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

struct asio_threads {
  asio::io_context server{1}, client{1};  // concurrency hint 1: single-threaded, no locking
  asio::executor_work_guard<asio::io_context::executor_type> g1{server.get_executor()}, g2{client.get_executor()};
  std::thread t1{[this] { server.run(); }}, t2{[this] { client.run(); }};
  ~asio_threads() {
    g1.reset();
    g2.reset();
    t1.join();
    t2.join();
  }
};

asio::awaitable<void> asio_session(tcp::socket s, std::uint64_t& served) {
  char buf[k_buffer];
  request_counter rc;
  std::string scratch;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), k_as_tuple);
    if (ec) break;
    const std::size_t k = rc.feed(n);
    if (k == 0) continue;
    served += k;
    auto [ec2, m] = co_await asio::async_write(s, asio::buffer(responses(k, scratch)), k_as_tuple);
    if (ec2) break;
  }
}

/// Counts finished coroutines of one thread; wait() returns once all `n` finished.
class asio_join {
 public:
  asio_join(asio::any_io_executor ex, std::uint64_t n) : m_open(n), m_done(ex, asio::steady_timer::time_point::max()) {}
  auto on_finish() {
    return [this](std::exception_ptr e, auto&&...) {
      if (e) std::rethrow_exception(e);
      if (--m_open == 0) m_done.cancel();
    };
  }
  asio::awaitable<void> wait() {
    while (m_open != 0) co_await m_done.async_wait(k_as_tuple);  // same thread: no race with on_finish
  }

 private:
  std::uint64_t m_open;
  asio::steady_timer m_done;
};

asio::awaitable<std::uint64_t> asio_server(tcp::acceptor& acceptor) {
  std::uint64_t served = 0;
  asio_join sessions(acceptor.get_executor(), g_connections);
  for (std::uint64_t i = 0; i < g_connections; ++i) {
    auto [ec, s] = co_await acceptor.async_accept(k_as_tuple);
    if (ec) std::abort();
    asio::co_spawn(acceptor.get_executor(), asio_session(std::move(s), served), sessions.on_finish());
  }
  co_await sessions.wait();
  co_return served;
}

asio::awaitable<void> asio_client_conn(tcp::endpoint ep, std::uint64_t count, std::uint64_t& answered) {
  tcp::socket s(co_await asio::this_coro::executor);
  auto [cec] = co_await s.async_connect(ep, k_as_tuple);
  if (cec) co_return;
  char buf[k_buffer];
  for (std::uint64_t i = 0; i < count; ++i) {
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(k_request), k_as_tuple);
    if (ec) co_return;
    std::size_t got = 0;
    while (got < k_response.size()) {
      auto [ec2, m] = co_await s.async_read_some(asio::buffer(buf), k_as_tuple);
      if (ec2) co_return;
      got += m;
    }
    ++answered;
  }
  s.shutdown(tcp::socket::shutdown_both);
}

asio::awaitable<std::uint64_t> asio_client(tcp::endpoint ep, std::uint64_t total) {
  auto ex = co_await asio::this_coro::executor;
  std::uint64_t answered = 0;
  asio_join conns(ex, g_connections);
  for (std::uint64_t i = 0; i < g_connections; ++i)
    asio::co_spawn(ex, asio_client_conn(ep, share(total, i), answered), conns.on_finish());
  co_await conns.wait();
  co_return answered;
}

answer run_asio(int, std::uint64_t total) {
  static asio_threads t;
  tcp::acceptor acceptor(t.server, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  acceptor.listen(asio::socket_base::max_listen_connections);
  const tcp::endpoint ep(asio::ip::address_v4::loopback(), acceptor.local_endpoint().port());
  auto served = asio::co_spawn(t.server, asio_server(acceptor), asio::use_future);
  auto answered = asio::co_spawn(t.client, asio_client(ep, total), asio::use_future);
  answer a{served.get(), answered.get()};
  asio::post(t.server, asio::use_future([&] { acceptor.close(); })).get();
  return a;
}

// ---- weft-asio: weft tasks over Asio sockets ------------------------------------------------

using weft::io::use_task;

weft::task<std::uint64_t> weft_asio_session(tcp::socket s) {
  char buf[k_buffer];
  request_counter rc;
  std::string scratch;
  std::uint64_t mine = 0;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_task);
    if (ec) break;
    const std::size_t k = rc.feed(n);
    if (k == 0) continue;
    mine += k;
    auto [ec2, m] = co_await asio::async_write(s, asio::buffer(responses(k, scratch)), use_task);
    if (ec2) break;
  }
  co_return mine;
}

weft::task<std::uint64_t> weft_asio_server(tcp::acceptor& acceptor) {
  std::vector<weft::fork_handle<std::uint64_t>> sessions;
  for (std::uint64_t i = 0; i < g_connections; ++i) {
    auto [ec, s] = co_await acceptor.async_accept(use_task);
    if (ec) std::abort();
    sessions.push_back(weft::spawn(weft_asio_session(std::move(s))).fork());
  }
  std::uint64_t served = 0;
  for (auto& h : sessions) served += co_await h;
  co_return served;
}

weft::task<std::uint64_t> weft_asio_client_conn(weft::io::asio_executor& io, tcp::endpoint ep, std::uint64_t count) {
  tcp::socket s(io.context());
  if (auto ec = co_await s.async_connect(ep, use_task)) co_return 0;
  char buf[k_buffer];
  std::uint64_t answered = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(k_request), use_task);
    if (ec) break;
    std::size_t got = 0;
    while (got < k_response.size()) {
      auto [ec2, m] = co_await s.async_read_some(asio::buffer(buf), use_task);
      if (ec2) co_return answered;
      got += m;
    }
    ++answered;
  }
  s.shutdown(tcp::socket::shutdown_both);
  co_return answered;
}

weft::task<std::uint64_t> weft_asio_client(weft::io::asio_executor& io, tcp::endpoint ep, std::uint64_t total) {
  std::vector<weft::task<std::uint64_t>> conns;
  for (std::uint64_t i = 0; i < g_connections; ++i) conns.push_back(weft_asio_client_conn(io, ep, share(total, i)));
  std::uint64_t answered = 0;
  for (std::uint64_t n : co_await weft::spawn_many(std::move(conns))) answered += n;
  co_return answered;
}

weft::task<void> deliver(weft::task<std::uint64_t> t, std::promise<std::uint64_t>& out) { out.set_value(co_await t); }

answer run_weft_asio(int, std::uint64_t total) {
  static weft::io::asio_executor server, client;
  tcp::acceptor acceptor(server.context(), tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  acceptor.listen(asio::socket_base::max_listen_connections);
  const tcp::endpoint ep(asio::ip::address_v4::loopback(), acceptor.local_endpoint().port());
  std::promise<std::uint64_t> served;
  weft::post(server, deliver(weft_asio_server(acceptor), served));
  const std::uint64_t answered = weft::sync_wait(client, weft_asio_client(client, ep, total));
  answer a{served.get_future().get(), answered};
  weft::sync_wait(server, [&]() -> weft::task<void> {
    acceptor.close();
    co_return;
  }());
  return a;
}

// ---- weft-uring: weft tasks over the io_uring backend --------------------------------------

weft::task<std::uint64_t> uring_session(weft::io::tcp_stream s) {
  char buf[k_buffer];
  request_counter rc;
  std::string scratch;
  std::uint64_t mine = 0;
  for (;;) {
    auto [ec, n] = co_await s.read_some(buf, sizeof buf);
    if (ec) break;
    const std::size_t k = rc.feed(n);
    if (k == 0) continue;
    mine += k;
    const std::string_view r = responses(k, scratch);
    auto [ec2, m] = co_await s.write_all(r.data(), r.size());
    if (ec2) break;
  }
  co_return mine;
}

weft::task<std::uint64_t> uring_server(weft::io::tcp_listener& listener) {
  std::vector<weft::fork_handle<std::uint64_t>> sessions;
  for (std::uint64_t i = 0; i < g_connections; ++i) {
    auto [ec, s] = co_await listener.accept();
    if (ec) std::abort();
    sessions.push_back(weft::spawn(uring_session(std::move(s))).fork());
  }
  std::uint64_t served = 0;
  for (auto& h : sessions) served += co_await h;
  co_return served;
}

weft::task<std::uint64_t> uring_client_conn(weft::io::uring_context& io, weft::io::endpoint ep, std::uint64_t count) {
  weft::io::tcp_stream s(io);
  if (auto ec = co_await s.connect(ep)) co_return 0;
  char buf[k_buffer];
  std::uint64_t answered = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto [ec, n] = co_await s.write_all(k_request.data(), k_request.size());
    if (ec) break;
    std::size_t got = 0;
    while (got < k_response.size()) {
      auto [ec2, m] = co_await s.read_some(buf, sizeof buf);
      if (ec2) co_return answered;
      got += m;
    }
    ++answered;
  }
  s.shutdown(SHUT_RDWR);
  co_return answered;
}

weft::task<std::uint64_t> uring_client(weft::io::uring_context& io, weft::io::endpoint ep, std::uint64_t total) {
  std::vector<weft::task<std::uint64_t>> conns;
  for (std::uint64_t i = 0; i < g_connections; ++i) conns.push_back(uring_client_conn(io, ep, share(total, i)));
  std::uint64_t answered = 0;
  for (std::uint64_t n : co_await weft::spawn_many(std::move(conns))) answered += n;
  co_return answered;
}

answer run_weft_uring(int, std::uint64_t total) {
  static weft::io::uring_context server, client;  // throws uring_unavailable where io_uring is blocked
  weft::io::tcp_listener listener(server);
  if (auto ec = listener.listen(weft::io::endpoint::loopback(0))) throw std::system_error(ec, "listen");
  const weft::io::endpoint ep = listener.local_endpoint();
  std::promise<std::uint64_t> served;
  weft::post(server, deliver(uring_server(listener), served));
  const std::uint64_t answered = weft::sync_wait(client, uring_client(client, ep, total));
  return {served.get_future().get(), answered};
}

const weft_bench::workload<answer> k_io_socket_st{
    .name = "io_socket_st",
    .size_meaning = "requests in total, over --connections N connections (default 20)",
    .default_size = 100'000,
    .size_ok = [](std::uint64_t n) { return n >= 1 && n <= 1'000'000'000; },
    .check =
        [](std::uint64_t n, const answer& a) {
          if (a.served != n)
            return weft_bench::verdict{
                false, a.served,
                "server read " + std::to_string(a.served) + " requests, expected " + std::to_string(n)};
          return weft_bench::expect_equal(a.answered, n);
        },
    .flavors =
        {
            {"asio", run_asio},
            {"weft-asio", run_weft_asio},
            {"weft-uring", run_weft_uring},
        },
};

}  // namespace

int main(int argc, char** argv) {
  // --connections N (or --connections=N) is this binary's own option; the rest is the driver's.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    if (arg == "--connections" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.starts_with("--connections=")) {
      value = arg.substr(std::string_view("--connections=").size());
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    char* end = nullptr;
    const std::string text(value);
    const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n < 1 || n > 10'000) {
      std::fprintf(stderr, "io_socket_st: --connections must be 1..10000 (got '%s')\n", text.c_str());
      return 2;
    }
    g_connections = n;
  }
  return weft_bench::run(static_cast<int>(rest.size()), rest.data(), k_io_socket_st);
}
