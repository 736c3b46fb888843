// http: a minimal HTTP/1.1 keep-alive server answering `GET /plaintext` with a fixed
// 13-byte body (the TechEmpower plaintext shape, no pipelining needed), driven by wrk on
// loopback.
//
//   bench/http --flavor F --threads T --connections C --seconds S [--runs R] [--pin]
//
// The binary starts the server with T threads, runs one short untimed wrk pass (warm-up),
// then R timed passes of `wrk -t1 -cC -dS --latency`, and prints the suite's report with,
// per run, requests_per_second, the p50/p99 latency and the errors. wrk must report no
// socket error and no non-2xx response, and the server must have answered at least as
// many requests as wrk counted: otherwise `FAIL:`. max_rss is the server's: this
// process's peak for the in-process flavors, the sum over nginx's processes for nginx.
// For bench/run, each wrk pass (the warm-up first) also prints a line
// `http: rps=... p50_us=... p99_us=... cpu_us=...` (cpu_us: the server's CPU time per
// request, which still tells servers apart when wrk, sharing the machine, is the
// bottleneck), and `--size C` is `--connections C`.
//
// --idle N first opens N keep-alive connections that make one request each and then stay
// open, idle, through the wrk runs (sources 127.0.0.2 and up, RLIMIT_NOFILE raised to fit
// them); it prints `idle: connections=N ... bytes_per_idle=B` (the server's resident
// memory before and after opening them), and fails if the server closed any.
//
// --pin puts wrk on a CPU of its own (the first this process may use) and the server on
// the others: on a small machine the only way to give the server a fixed share.
//
// Flavors. Every in-process server listens on T sockets bound to one port with
// SO_REUSEPORT, one per thread, so the kernel spreads connections over the threads:
//   asio        plain Asio C++20 coroutines, one io_context per thread (the peer a weft
//               user would otherwise write);
//   weft-asio   weft tasks over T weft::io::asio_executor, use_task;
//   weft        weft tasks on one weft::io::io_pool of T workers, each with its own
//               io_uring ring; one listener and accept loop per worker; connections
//               receive() into buffers leased from their worker's pool, and keep no
//               buffer between requests;
//   weft-uring  weft tasks over T weft::io::uring_context, tcp_listener/tcp_stream,
//               read_some into a 4 KiB buffer of each connection (as asio);
//   nginx       the Debian package, started by this binary with a generated config
//               (worker_processes T, access log off, keep-alive) in a temporary
//               directory, stopped and removed afterwards; never the system's service.
//   weft-https  weft's flavor over weft::io::tls_stream (component weft::tls);
//   nginx-https nginx with `listen ... ssl`. Both: one certificate made at start (EC
//               P-256, in the temporary directory for nginx), TLS 1.3 only with
//               TLS_AES_128_GCM_SHA256, session tickets on (--no-resume: off), wrk
//               over https://. --handshakes: every request asks `Connection: close`,
//               so every request is a new connection and a handshake (full, or resumed
//               where the client offers a ticket), and requests/s is handshakes/s.
// Every server sends the same response: status line, Server, Date (refreshed once a
// second), Content-Type, Content-Length and the body, as nginx's does.
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <openssl/ssl.h>

#include <weft/io/io.hpp>
#include <weft/io/tls.hpp>
#include <weft/weft.hpp>

#include "http_clients.hpp"

namespace {

using asio::ip::tcp;

using http_bench::g_wrk_close;
using http_bench::g_wrk_cpu;
using http_bench::g_wrk_https;
using http_bench::idle_clients;
using http_bench::k_body;
using http_bench::raise_fd_limit;
using http_bench::run_wrk;
using http_bench::wrk_result;
constexpr std::size_t k_buffer = 4096;

// ---- the response ---------------------------------------------------------------------------

/// The response to one `GET /plaintext`, rebuilt by each thread when the second changes
/// (the Date header). Not thread-safe: one per thread.
class response_cache {
 public:
  /// `close`: with `Connection: close` (the connection ends after it).
  std::string_view get(bool close = false) {
    const std::time_t now = std::time(nullptr);
    if (now != m_second) {
      m_second = now;
      char date[64];
      std::tm tm{};
      ::gmtime_r(&now, &tm);
      std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
      m_text = "HTTP/1.1 200 OK\r\nServer: weft-bench\r\nDate: ";
      m_text += date;
      m_text += "\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n";
      m_close = m_text + "Connection: close\r\n\r\n";
      m_close += k_body;
      m_text += "\r\n";
      m_text += k_body;
    }
    return close ? m_close : m_text;
  }

 private:
  std::time_t m_second = 0;
  std::string m_text;
  std::string m_close;
};

constexpr std::string_view k_not_found = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

/// Requests answered and requests refused (not `GET /plaintext`), over all threads.
struct counters {
  std::atomic<std::uint64_t> answered{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> handshakes{0};  // TLS flavors: handshakes completed,
  std::atomic<std::uint64_t> resumed{0};     // and of them resumed sessions
};

/// One connection's request parser: feed it what was read, get the responses to send.
/// A request is complete at its blank line (no bodies: GET only). Not thread-safe.
class connection_state {
 public:
  /// Appends `n` bytes from `data`; writes the responses for every request they
  /// complete into `out` (cleared first). False when a request was malformed or too
  /// large (close the connection).
  bool feed(const char* data, std::size_t n, response_cache& cache, counters& c, std::string& out) {
    out.clear();
    m_pending.append(data, n);
    std::size_t start = 0;
    for (;;) {
      const std::size_t end = m_pending.find("\r\n\r\n", start);
      if (end == std::string::npos) break;
      const std::string_view request(m_pending.data() + start, end - start);
      if (request.starts_with("GET /plaintext ")) {
        const bool close = asks_close(request);
        out += cache.get(close);
        c.answered.fetch_add(1, std::memory_order_relaxed);
        if (close) {  // nothing after it is answered: the connection ends with this response
          m_close = true;
          m_pending.clear();
          return true;
        }
      } else {
        out += k_not_found;
        c.refused.fetch_add(1, std::memory_order_relaxed);
      }
      start = end + 4;
    }
    m_pending.erase(0, start);
    return m_pending.size() <= k_buffer;
  }
  /// True once a request asked for `Connection: close`: send `out`, then close.
  bool closing() const noexcept { return m_close; }
  /// Between requests (nothing pending): frees the memory of the partial-request store and
  /// of `out`, so that an idle connection keeps none (as nginx frees its buffers).
  void release_idle(std::string& out) {
    if (!m_pending.empty()) return;
    std::string().swap(m_pending);
    std::string().swap(out);
  }

 private:
  static bool asks_close(std::string_view request) {
    std::string lower(request);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return lower.find("\r\nconnection: close") != std::string::npos;
  }

  std::string m_pending;
  bool m_close = false;
};

// ---- plain Asio: one io_context per thread ----------------------------------------------------

constexpr auto k_as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

asio::awaitable<void> asio_session(tcp::socket s, counters& c) {
  static thread_local response_cache cache;
  connection_state st;
  std::string out;
  char buf[k_buffer];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), k_as_tuple);
    if (ec) co_return;
    if (!st.feed(buf, n, cache, c, out)) co_return;
    if (out.empty()) continue;
    auto [wec, m] = co_await asio::async_write(s, asio::buffer(out), k_as_tuple);
    if (wec) co_return;
    (void)m;
  }
}

asio::awaitable<void> asio_accept(tcp::acceptor& a, counters& c) {
  for (;;) {
    auto [ec, s] = co_await a.async_accept(k_as_tuple);
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) continue;
    s.set_option(tcp::no_delay(true));
    asio::co_spawn(a.get_executor(), asio_session(std::move(s), c), asio::detached);
  }
}

/// An acceptor bound to `port` on loopback with SO_REUSEPORT.
tcp::acceptor reuse_port_acceptor(asio::io_context& ctx, unsigned short port) {
  tcp::acceptor a(ctx);
  const tcp::endpoint at(asio::ip::address_v4::loopback(), port);
  a.open(at.protocol());
  a.set_option(tcp::acceptor::reuse_address(true));
  const int one = 1;
  if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
    throw std::system_error(errno, std::system_category(), "SO_REUSEPORT");
  a.bind(at);
  a.listen(asio::socket_base::max_listen_connections);
  return a;
}

/// CPU time (user + system) this process has used, in seconds (its children's not counted).
double self_cpu_seconds() {
  struct rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/// A server running until destroyed.
/// A field of /proc/<pid>/status in KiB ("VmRSS:", "VmHWM:"); 0 when unreadable.
long proc_status_kib(pid_t pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field)) return std::strtol(line.c_str() + field.size(), nullptr, 10);
  }
  return 0;
}

class server {
 public:
  virtual ~server() = default;
  virtual unsigned short port() const = 0;
  virtual const counters& stats() const = 0;
  /// CPU seconds the server has used so far: on a machine whose client (wrk) takes as
  /// much CPU as the server, requests/s stop telling servers apart; CPU per request does.
  virtual double cpu_seconds() const { return self_cpu_seconds(); }
  /// The server's resident memory now (this process's, for the in-process flavors).
  virtual long rss_kib() const { return proc_status_kib(::getpid(), "VmRSS:"); }
};

class asio_server final : public server {
 public:
  explicit asio_server(int threads) {
    for (int i = 0; i < threads; ++i) m_ctx.push_back(std::make_unique<asio::io_context>(1));
    m_acceptors.push_back(reuse_port_acceptor(*m_ctx[0], 0));
    m_port = m_acceptors[0].local_endpoint().port();
    for (int i = 1; i < threads; ++i) m_acceptors.push_back(reuse_port_acceptor(*m_ctx[i], m_port));
    for (int i = 0; i < threads; ++i) {
      asio::co_spawn(*m_ctx[i], asio_accept(m_acceptors[i], m_counters), asio::detached);
      m_threads.emplace_back([ctx = m_ctx[i].get()] { ctx->run(); });
    }
  }
  ~asio_server() override {
    for (auto& c : m_ctx) c->stop();
    for (auto& t : m_threads) t.join();
  }
  unsigned short port() const override { return m_port; }
  const counters& stats() const override { return m_counters; }

 private:
  counters m_counters;
  std::vector<std::unique_ptr<asio::io_context>> m_ctx;
  std::vector<tcp::acceptor> m_acceptors;
  std::vector<std::thread> m_threads;
  unsigned short m_port = 0;
};

// ---- weft servers: one accept loop per executor, all under one stop token ---------------------

/// The accept loops of a weft server, each the root of its executor's connections:
/// destroying this stops them all (through one token) and waits until every loop and
/// every connection ended. Declare it after the executors and listeners it uses.
class accept_loops {
 public:
  accept_loops() = default;
  accept_loops(const accept_loops&) = delete;
  accept_loops& operator=(const accept_loops&) = delete;
  ~accept_loops() {
    m_stop.request_stop();
    for (auto& d : m_done) d->wait(false);
  }
  /// Runs `loop` on `ex` under this server's token, inside a scope that joins it.
  void start(weft::executor& ex, weft::task<void> loop) {
    m_done.push_back(std::make_unique<std::atomic<bool>>(false));
    weft::post(ex, [](std::stop_token tok, weft::task<void> l, std::atomic<bool>& done) -> weft::task<void> {
      {
        weft::scope root{std::move(tok)};
        root.spawn(std::move(l));
        co_await root.join();
      }
      done.store(true);
      done.notify_one();
    }(m_stop.get_token(), std::move(loop), *m_done.back()));
  }

 private:
  std::stop_source m_stop;
  std::vector<std::unique_ptr<std::atomic<bool>>> m_done;
};

// ---- weft tasks over Asio: one asio_executor per thread ---------------------------------------

weft::task<void> weft_asio_session(tcp::socket s, counters& c) {
  static thread_local response_cache cache;
  connection_state st;
  std::string out;
  char buf[k_buffer];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), weft::io::use_task);
    if (ec) co_return;
    if (!st.feed(buf, n, cache, c, out)) co_return;
    if (out.empty()) continue;
    auto [wec, m] = co_await asio::async_write(s, asio::buffer(out), weft::io::use_task);
    if (wec) co_return;
    (void)m;
  }
}

weft::task<void> weft_asio_accept(tcp::acceptor& a, counters& c) {
  weft::scope conns{co_await weft::this_task::stop_token()};
  for (;;) {
    auto [ec, s] = co_await a.async_accept(weft::io::use_task);
    if (ec == std::errc::operation_canceled) break;
    if (ec) continue;
    s.set_option(tcp::no_delay(true));
    conns.spawn(weft_asio_session, std::move(s), std::ref(c));
  }
  co_await conns.join();
}

class weft_asio_server final : public server {
 public:
  explicit weft_asio_server(int threads) {
    for (int i = 0; i < threads; ++i) m_io.push_back(std::make_unique<weft::io::asio_executor>());
    m_acceptors.push_back(reuse_port_acceptor(m_io[0]->context(), 0));
    m_port = m_acceptors[0].local_endpoint().port();
    for (int i = 1; i < threads; ++i) m_acceptors.push_back(reuse_port_acceptor(m_io[i]->context(), m_port));
    for (int i = 0; i < threads; ++i) m_loops.start(*m_io[i], weft_asio_accept(m_acceptors[i], m_counters));
  }
  unsigned short port() const override { return m_port; }
  const counters& stats() const override { return m_counters; }

 private:
  counters m_counters;
  std::vector<std::unique_ptr<weft::io::asio_executor>> m_io;
  std::vector<tcp::acceptor> m_acceptors;
  unsigned short m_port = 0;
  accept_loops m_loops;  // last: stopped and joined first
};

// ---- weft tasks over io_uring: one uring_context per thread -----------------------------------

weft::task<void> weft_uring_session(weft::io::tcp_stream s, counters& c) {
  static thread_local response_cache cache;
  connection_state st;
  std::string out;
  char buf[k_buffer];
  for (;;) {
    auto [ec, n] = co_await s.read_some(buf, sizeof buf);
    if (ec || n == 0) co_return;
    if (!st.feed(buf, n, cache, c, out)) co_return;
    if (out.empty()) continue;
    auto written = co_await s.write_all(out.data(), out.size());
    if (written.ec || st.closing()) co_return;
  }
}

using weft_session = weft::task<void> (*)(weft::io::tcp_stream, counters&);

// One listener's accept loop; each connection runs `session`.
weft::task<void> weft_uring_accept(weft::io::tcp_listener& l, counters& c, weft_session session) {
  weft::scope conns{co_await weft::this_task::stop_token()};
  for (;;) {
    auto [ec, s] = co_await l.accept();
    if (ec == std::errc::operation_canceled) break;
    if (ec) continue;
    (void)s.set_no_delay(true);
    conns.spawn(session, std::move(s), std::ref(c));
  }
  co_await conns.join();
}

class weft_uring_server final : public server {
 public:
  explicit weft_uring_server(int threads) {
    for (int i = 0; i < threads; ++i) {
      m_io.push_back(std::make_unique<weft::io::uring_context>());
      m_listeners.push_back(std::make_unique<weft::io::tcp_listener>(*m_io[i]));
      const auto at = weft::io::endpoint::loopback(m_port);
      if (auto ec = m_listeners[i]->listen(at, {.backlog = SOMAXCONN, .reuse_port = true}))
        throw std::system_error(ec, "weft-uring: listen");
      m_port = m_listeners[0]->local_endpoint().port();
    }
    for (int i = 0; i < threads; ++i)
      m_loops.start(*m_io[i], weft_uring_accept(*m_listeners[i], m_counters, weft_uring_session));
  }
  unsigned short port() const override { return m_port; }
  const counters& stats() const override { return m_counters; }

 private:
  counters m_counters;
  std::vector<std::unique_ptr<weft::io::uring_context>> m_io;
  std::vector<std::unique_ptr<weft::io::tcp_listener>> m_listeners;
  unsigned short m_port = 0;
  accept_loops m_loops;  // last: stopped and joined first
};

// ---- weft tasks on an io_pool: a ring per worker ----------------------------------------------

/// One SO_REUSEPORT listener on loopback per worker of `io`, all on one port (the kernel's pick):
/// each worker accepts on its own ring.
struct worker_listeners {
  std::vector<std::unique_ptr<weft::io::tcp_listener>> listeners;
  unsigned short port = 0;

  worker_listeners(weft::io::io_pool& io, const char* flavor) {
    for (std::size_t i = 0; i < io.thread_count(); ++i) {
      listeners.push_back(std::make_unique<weft::io::tcp_listener>(io, i));
      if (auto ec =
              listeners[i]->listen(weft::io::endpoint::loopback(port), {.backlog = SOMAXCONN, .reuse_port = true}))
        throw std::system_error(ec, std::string(flavor) + ": listen");
      port = listeners[0]->local_endpoint().port();
    }
  }
};

// A connection of the weft flavor: receive() leases a buffer of the worker's pool only once
// a request arrived, so a connection waiting for its next request holds no buffer.
weft::task<void> weft_leased_session(weft::io::tcp_stream s, counters& c) {
  static thread_local response_cache cache;
  connection_state st;
  std::string out;
  for (;;) {
    auto [ec, buf] = co_await s.receive();
    if (ec == std::errc::no_buffer_space) {  // every buffer leased: the request waits in the socket
      co_await weft::io::sleep_for(s.context(), std::chrono::milliseconds(1));
      continue;
    }
    if (ec) co_return;
    const bool ok = st.feed(reinterpret_cast<const char*>(buf.data()), buf.size(), cache, c, out);
    buf.reset();
    if (!ok) co_return;
    if (out.empty()) continue;
    auto written = co_await s.write_all(out.data(), out.size());
    if (written.ec || st.closing()) co_return;
    st.release_idle(out);
  }
}

class weft_pool_server final : public server {
 public:
  explicit weft_pool_server(int threads)
      : m_io(weft::pool_options{.threads = static_cast<std::size_t>(threads)}), m_listen(m_io, "weft") {
    for (auto& l : m_listen.listeners) m_loops.start(m_io, weft_uring_accept(*l, m_counters, weft_leased_session));
  }
  unsigned short port() const override { return m_listen.port; }
  const counters& stats() const override { return m_counters; }

 private:
  counters m_counters;
  weft::io::io_pool m_io;
  worker_listeners m_listen;
  accept_loops m_loops;  // last: stopped and joined first
};

// ---- weft over TLS on an io_pool ----------------------------------------------------------------

/// The certificate of the https flavors, made once per process (EC P-256, 2 days).
const weft::io::tls_certificate& bench_certificate() {
  static const weft::io::tls_certificate c = weft::io::make_self_signed_certificate({"localhost", "127.0.0.1"}, 2);
  return c;
}

/// TLS 1.3 with TLS_AES_128_GCM_SHA256 only, as the nginx-https config says.
weft::io::tls_context https_context(bool resume) {
  auto ctx = weft::io::tls_context::server();
  if (auto ec = ctx.use_certificate_chain(bench_certificate().chain_pem)) throw std::system_error(ec, "certificate");
  if (auto ec = ctx.use_private_key(bench_certificate().key_pem)) throw std::system_error(ec, "key");
  if (auto ec = ctx.set_min_version(weft::io::tls_version::tls1_3)) throw std::system_error(ec, "TLS 1.3");
  SSL_CTX_set_ciphersuites(static_cast<SSL_CTX*>(ctx.native_handle()), "TLS_AES_128_GCM_SHA256");
  ctx.set_session_resumption(resume);
  return ctx;
}

weft::task<void> weft_https_session(weft::io::tcp_stream s, weft::io::tls_context ctx, counters& c) {
  static thread_local response_cache cache;
  weft::io::tls_stream tls(std::move(s), ctx);
  if (co_await tls.handshake()) co_return;
  c.handshakes.fetch_add(1, std::memory_order_relaxed);
  if (tls.resumed()) c.resumed.fetch_add(1, std::memory_order_relaxed);
  connection_state st;
  std::string out;
  char buf[k_buffer];
  for (;;) {
    auto [ec, n] = co_await tls.read_some(buf, sizeof buf);
    if (ec || n == 0) break;
    if (!st.feed(buf, n, cache, c, out)) break;
    if (out.empty()) continue;
    auto written = co_await tls.write_all(out.data(), out.size());
    if (written.ec) co_return;
    if (st.closing()) {
      (void)co_await tls.shutdown();  // close_notify, as nginx sends; the client's may not come
      co_return;
    }
  }
}

weft::task<void> weft_https_accept(weft::io::tcp_listener& l, weft::io::tls_context ctx, counters& c) {
  weft::scope conns{co_await weft::this_task::stop_token()};
  for (;;) {
    auto [ec, s] = co_await l.accept();
    if (ec == std::errc::operation_canceled) break;
    if (ec) continue;
    (void)s.set_no_delay(true);
    conns.spawn(weft_https_session, std::move(s), ctx, std::ref(c));
  }
  co_await conns.join();
}

class weft_https_server final : public server {
 public:
  weft_https_server(int threads, bool resume)
      : m_io(weft::pool_options{.threads = static_cast<std::size_t>(threads)}),
        m_ctx(https_context(resume)),
        m_listen(m_io, "weft-https") {
    for (auto& l : m_listen.listeners) m_loops.start(m_io, weft_https_accept(*l, m_ctx, m_counters));
  }
  unsigned short port() const override { return m_listen.port; }
  const counters& stats() const override { return m_counters; }

 private:
  counters m_counters;
  weft::io::io_pool m_io;
  weft::io::tls_context m_ctx;
  worker_listeners m_listen;
  accept_loops m_loops;  // last: stopped and joined first
};

// ---- nginx: the peer, as a child process ------------------------------------------------------

/// A port free now on loopback (the kernel's pick; nginx binds it right after).
unsigned short free_port() {
  asio::io_context ctx;
  tcp::acceptor a(ctx, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  return a.local_endpoint().port();
}

/// True once something accepts connections on loopback:`port`.
bool accepts(unsigned short port) {
  asio::io_context ctx;
  tcp::socket s(ctx);
  std::error_code ec;
  s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
  return !ec;
}

/// CPU seconds (utime + stime) process `pid` has used; 0 when unreadable.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {  // fields 14 and 15: utime, stime (ticks)
    if (i == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(f.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// Peak resident set (VmHWM) of process `pid`, in KiB; 0 when unreadable.
long vm_hwm_kib(pid_t pid) { return proc_status_kib(pid, "VmHWM:"); }

/// nginx's worker_rlimit_nofile for `connections`: two descriptors each (a proxy's share)
/// and some spare, but no more than this process's hard limit, which a worker cannot pass
/// (it inherits this process's raised soft limit in any case).
unsigned long long nofile_for(int connections) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const auto want = 2ULL * static_cast<unsigned long long>(connections) + 1024;
  return rl.rlim_max == RLIM_INFINITY ? want : std::min<unsigned long long>(want, rl.rlim_max);
}

class nginx_server final : public server {
 public:
  /// `https`: TLS as weft-https has it (the certificate in this server's directory);
  /// `resume`: session tickets on.
  nginx_server(int threads, int connections, bool https = false, bool resume = true) {
    char tmpl[] = "/tmp/weft-bench-nginx-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::system_error(errno, std::system_category(), "nginx: mkdtemp");
    m_dir = tmpl;
    m_port = free_port();
    std::string tls;
    if (https) {
      std::ofstream(m_dir / "cert.pem") << bench_certificate().chain_pem;
      std::ofstream(m_dir / "key.pem") << bench_certificate().key_pem;
      tls = "    ssl_certificate " + (m_dir / "cert.pem").string() + ";\n" + "    ssl_certificate_key " +
            (m_dir / "key.pem").string() + ";\n" +
            "    ssl_protocols TLSv1.3;\n"
            "    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;\n" +
            (resume ? "    ssl_session_tickets on;\n" : "    ssl_session_tickets off;\n    ssl_session_cache off;\n");
    }
    {
      std::ofstream conf(m_dir / "nginx.conf");
      conf << "worker_processes " << threads << ";\n"
           << "daemon off;\n"
           << "pid " << (m_dir / "nginx.pid").string() << ";\n"
           << "error_log " << (m_dir / "error.log").string() << " warn;\n"
           << "worker_rlimit_nofile " << nofile_for(connections)
           << ";\n"
           // An eighth more: a worker with under 1/16 of its connections free closes idle
           // keep-alive ones to make room.
           << "events { worker_connections " << connections + connections / 8 + 1024 << "; }\n"
           << "http {\n"
           << "  access_log off;\n"
           << "  keepalive_timeout 65;\n"
           << "  keepalive_requests 100000000;\n"
           << "  client_body_temp_path " << (m_dir / "body").string() << ";\n"
           << "  proxy_temp_path " << (m_dir / "proxy").string() << ";\n"
           << "  fastcgi_temp_path " << (m_dir / "fastcgi").string() << ";\n"
           << "  uwsgi_temp_path " << (m_dir / "uwsgi").string() << ";\n"
           << "  scgi_temp_path " << (m_dir / "scgi").string() << ";\n"
           << "  server {\n"
           << "    listen 127.0.0.1:" << m_port << (https ? " ssl" : "") << " reuseport backlog=65535;\n"
           << tls << "    location = /plaintext { default_type text/plain; return 200 \"" << k_body << "\"; }\n"
           << "  }\n"
           << "}\n";
    }
    m_pid = ::fork();
    if (m_pid < 0) throw std::system_error(errno, std::system_category(), "nginx: fork");
    if (m_pid == 0) {
      const std::string prefix = m_dir.string() + "/";
      const std::string conf = (m_dir / "nginx.conf").string();
      ::execlp("nginx", "nginx", "-p", prefix.c_str(), "-c", conf.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "http: cannot run nginx: %s\n", std::strerror(errno));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!accepts(m_port)) {
      int status = 0;
      if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_pid = -1;
        throw std::runtime_error("nginx exited at start (see its error log in " + m_dir.string() + ")");
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("nginx did not start listening in 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~nginx_server() override {
    if (m_pid > 0) {
      ::kill(m_pid, SIGTERM);  // fast shutdown of the master and its workers
      int status = 0;
      ::waitpid(m_pid, &status, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  unsigned short port() const override { return m_port; }
  const counters& stats() const override { return m_counters; }  // nginx counts nothing here
  /// The sum of VmHWM over the master and its workers.
  long max_rss_kib() const {
    long total = vm_hwm_kib(m_pid);
    for (pid_t child : workers()) total += vm_hwm_kib(child);
    return total;
  }
  /// The sum of VmRSS over the master and its workers.
  long rss_kib() const override {
    long total = proc_status_kib(m_pid, "VmRSS:");
    for (pid_t child : workers()) total += proc_status_kib(child, "VmRSS:");
    return total;
  }
  /// The CPU time of the master and its workers.
  double cpu_seconds() const override {
    double total = process_cpu_seconds(m_pid);
    for (pid_t child : workers()) total += process_cpu_seconds(child);
    return total;
  }

 private:
  std::vector<pid_t> workers() const {
    std::ifstream children("/proc/" + std::to_string(m_pid) + "/task/" + std::to_string(m_pid) + "/children");
    std::vector<pid_t> out;
    pid_t child = 0;
    while (children >> child) out.push_back(child);
    return out;
  }

  counters m_counters;
  std::filesystem::path m_dir;
  pid_t m_pid = -1;
  unsigned short m_port = 0;
};

// ---- the command line --------------------------------------------------------------------------

constexpr std::string_view k_flavors[] = {"weft",  "weft-uring", "weft-asio",  "asio",
                                          "nginx", "weft-https", "nginx-https"};

struct options {
  std::string flavor = "weft";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int connections = 256;
  int seconds = 5;
  int runs = 1;
  bool pin = false;
  int warmup = 1;           // seconds of the untimed wrk run
  bool handshakes = false;  // every request on a new connection (Connection: close)
  bool resume = true;       // TLS flavors: session tickets
  int idle = 0;             // idle keep-alive connections held open beside wrk's
};

[[noreturn]] void usage(int status) {
  std::fprintf(status == 0 ? stdout : stderr,
               "usage: http [--flavor F] [--threads T] [--connections C] [--seconds S] [--runs R] [--pin]\n"
               "            [--warmup S] [--handshakes] [--no-resume] [--idle N] [--list]\n"
               "  --flavor F       one of: weft weft-uring weft-asio asio nginx weft-https nginx-https (default weft)\n"
               "  --threads T      server threads (nginx: worker processes), 1..1024 (default: hardware threads)\n"
               "  --connections C  wrk's connections, 1..60000 (default 256); --size C says the same\n"
               "  --seconds S      length of each timed wrk run, 1..3600 (default 5)\n"
               "  --runs R         timed runs after one untimed warm-up, 1..100 (default 1)\n"
               "  --pin            wrk on the first CPU this process may use, the server on the others\n"
               "  --warmup S       length of the untimed warm-up run, 1..600 (default 1; thousands of TLS\n"
               "                   connections take longer than that to make)\n"
               "  --handshakes     every request asks Connection: close (a connection, and a TLS handshake, each)\n"
               "  --no-resume      TLS flavors: session tickets off (every handshake a full one)\n"
               "  --idle N         first open N keep-alive connections (one request each, then idle, from\n"
               "                   127.0.0.2 and up) and report the server's memory per idle connection;\n"
               "                   they must still be open at the end (default 0, at most 500000)\n"
               "  --list           print the flavors, one a line, and exit\n");
  std::exit(status);
}

int parse_int(const char* name, const char* text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "http: %s must be %d..%d (got '%s')\n", name, lo, hi, text);
    usage(2);
  }
  return static_cast<int>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "http: %s needs a value\n", argv[i]);
        usage(2);
      }
      return argv[++i];
    };
    if (a == "--flavor") {
      o.flavor = value();
      bool known = false;
      for (auto f : k_flavors) known = known || f == o.flavor;
      if (!known) {
        std::fprintf(stderr, "http: unknown flavor '%s'\n", o.flavor.c_str());
        usage(2);
      }
    } else if (a == "--threads") {
      o.threads = parse_int("--threads", value(), 1, 1024);
    } else if (a == "--connections" || a == "--size") {
      o.connections = parse_int("--connections", value(), 1, 60000);
    } else if (a == "--seconds") {
      o.seconds = parse_int("--seconds", value(), 1, 3600);
    } else if (a == "--runs") {
      o.runs = parse_int("--runs", value(), 1, 100);
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--warmup") {
      o.warmup = parse_int("--warmup", value(), 1, 600);
    } else if (a == "--handshakes") {
      o.handshakes = true;
    } else if (a == "--no-resume") {
      o.resume = false;
    } else if (a == "--idle") {
      o.idle = parse_int("--idle", value(), 0, 500000);
    } else if (a == "--list") {
      for (auto f : k_flavors) std::printf("%.*s\n", static_cast<int>(f.size()), f.data());
      std::exit(0);
    } else if (a == "--help" || a == "-h") {
      usage(0);
    } else {
      std::fprintf(stderr, "http: unknown option '%s'\n", argv[i]);
      usage(2);
    }
  }
  return o;
}

/// Room for the connections: raises RLIMIT_NOFILE to what the server's ends of
int fail(const std::string& what) {
  std::printf("FAIL: %s\n", what.c_str());
  return 1;
}

/// --pin: wrk gets the first CPU this process may use, the server (this process, its
/// threads and nginx's processes, which inherit the mask) the others, so that client and
/// server do not take each other's CPU. Returns an error message, or "" when pinned.
std::string pin_client_and_server() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return std::string("sched_getaffinity: ") + std::strerror(errno);
  if (CPU_COUNT(&allowed) < 2)
    return "--pin needs 2 CPUs or more (this process may use " + std::to_string(CPU_COUNT(&allowed)) + ")";
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  cpu_set_t server = allowed;
  CPU_CLR(first, &server);
  if (::sched_setaffinity(0, sizeof server, &server) != 0)
    return std::string("sched_setaffinity: ") + std::strerror(errno);
  g_wrk_cpu = first;
  std::fprintf(stderr, "http: wrk on CPU %d, the server on the %d others\n", first, CPU_COUNT(&server));
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (o.idle > 0 && o.flavor.ends_with("-https")) {
    std::fprintf(stderr, "http: --idle speaks plain HTTP: not with %s\n", o.flavor.c_str());
    return 2;
  }
  if (!raise_fd_limit(o.connections, o.idle)) return fail("too few file descriptors for --idle");
  ::signal(SIGPIPE, SIG_IGN);
  // Forked first, while this process has one thread (see idle_clients).
  std::unique_ptr<idle_clients> idle;
  try {
    if (o.idle > 0) idle = std::make_unique<idle_clients>(o.idle);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (o.pin) {
    if (const std::string why = pin_client_and_server(); !why.empty()) {
      std::printf("SKIP: %s\n", why.c_str());  // this machine cannot run the pinned form
      return 77;
    }
  }
  try {
    std::unique_ptr<server> srv;
    nginx_server* nginx = nullptr;
    if (o.flavor == "asio") {
      srv = std::make_unique<asio_server>(o.threads);
    } else if (o.flavor == "weft-asio") {
      srv = std::make_unique<weft_asio_server>(o.threads);
    } else if (o.flavor == "weft") {
      srv = std::make_unique<weft_pool_server>(o.threads);
    } else if (o.flavor == "weft-uring") {
      srv = std::make_unique<weft_uring_server>(o.threads);
    } else if (o.flavor == "weft-https") {
      srv = std::make_unique<weft_https_server>(o.threads, o.resume);
    } else {
      // Its worker_connections must hold the idle ones too: a worker out of connections
      // closes idle keep-alive ones to make room.
      auto n = std::make_unique<nginx_server>(o.threads, o.connections + o.idle, o.flavor == "nginx-https", o.resume);
      nginx = n.get();
      srv = std::move(n);
    }
    g_wrk_https = o.flavor.ends_with("-https");
    g_wrk_close = o.handshakes;
    const auto check = [&](const wrk_result& r, std::uint64_t answered_before) -> std::string {
      if (r.socket_errors != 0) return "wrk reported " + std::to_string(r.socket_errors) + " socket errors:\n" + r.raw;
      if (r.non_2xx != 0) return "wrk got " + std::to_string(r.non_2xx) + " non-2xx responses";
      if (r.requests == 0) return "wrk completed no request";
      if (nginx == nullptr) {
        const std::uint64_t answered = srv->stats().answered.load() - answered_before;
        if (answered < r.requests)
          return "the server answered " + std::to_string(answered) + " requests, wrk counted " +
                 std::to_string(r.requests);
        if (const auto refused = srv->stats().refused.load(); refused != 0)
          return "the server refused " + std::to_string(refused) + " requests";
      }
      return {};
    };
    // cpu_us: the server's CPU time per request wrk completed, in microseconds.
    const auto metrics = [](const wrk_result& r, double cpu_s) {
      std::printf("http: rps=%.0f p50_us=%.0f p99_us=%.0f cpu_us=%.2f\n", r.requests_per_second, r.p50_us, r.p99_us,
                  cpu_s * 1e6 / static_cast<double>(r.requests));
    };
    if (idle != nullptr) {
      const long before = srv->rss_kib();
      const auto start = std::chrono::steady_clock::now();
      idle->open(srv->port());
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last ones settle
      const long after = srv->rss_kib();
      std::printf("idle: connections=%d rss_before_kib=%ld rss_after_kib=%ld bytes_per_idle=%.0f opened_s=%.1f\n",
                  o.idle, before, after, static_cast<double>(after - before) * 1024.0 / o.idle, took);
    }
    double cpu_before = srv->cpu_seconds();
    const wrk_result warm = run_wrk(srv->port(), o.connections, o.warmup);  // untimed
    if (auto why = check(warm, 0); !why.empty()) return fail("warm-up: " + why);
    metrics(warm, srv->cpu_seconds() - cpu_before);
    std::vector<wrk_result> runs;
    for (int i = 0; i < o.runs; ++i) {
      const std::uint64_t before = srv->stats().answered.load();
      cpu_before = srv->cpu_seconds();
      runs.push_back(run_wrk(srv->port(), o.connections, o.seconds));
      const double cpu = srv->cpu_seconds() - cpu_before;
      if (auto why = check(runs.back(), before); !why.empty()) return fail("run " + std::to_string(i + 1) + ": " + why);
      metrics(runs.back(), cpu);
    }
    if (idle != nullptr) {
      if (const int n = idle->disturbed(); n != 0)
        return fail(std::to_string(n) + " of the " + std::to_string(o.idle) +
                    " idle connections were closed or written to");
      std::printf("idle: all %d still open and quiet\n", o.idle);
    }
    struct rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const long rss = nginx != nullptr ? nginx->max_rss_kib() : ru.ru_maxrss;
    std::uint64_t total = 0;
    std::printf("threads: %d\nconnections: %d\nruns:\n", o.threads, o.connections);
    for (const auto& r : runs) {
      total += r.requests;
      std::printf(
          "  - iteration_count: 1\n"
          "    duration: %lld us\n"
          "    max_rss: %ld KiB\n"
          "    requests_per_second: %.0f\n"
          "    latency_p50: %.0f us\n"
          "    latency_p99: %.0f us\n"
          "    errors: 0\n",
          static_cast<long long>(o.seconds) * 1'000'000, rss, r.requests_per_second, r.p50_us, r.p99_us);
    }
    if (g_wrk_https && nginx == nullptr)
      std::printf("handshakes: %llu (%llu resumed)\n", static_cast<unsigned long long>(srv->stats().handshakes.load()),
                  static_cast<unsigned long long>(srv->stats().resumed.load()));
    std::printf("output: %llu\n", static_cast<unsigned long long>(total));
    return 0;
  } catch (const weft::io::uring_unavailable& e) {
    std::printf("SKIP: io_uring is unavailable: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
