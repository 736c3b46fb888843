// http_clients.hpp: the client side of bench/http (bench/http.cpp): wrk, run as a child
// process and its report read, and the idle keep-alive connections of --idle, held by
// forked processes. Included by http.cpp only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace http_bench {

/// The body of every response (`GET /plaintext`), the same for every server.
inline constexpr std::string_view k_body = "Hello, World!";

// ---- wrk ------------------------------------------------------------------------------------------

struct wrk_result {
  double requests_per_second = 0;
  std::uint64_t requests = 0;
  double p50_us = 0, p99_us = 0;
  std::uint64_t socket_errors = 0;
  std::uint64_t non_2xx = 0;
  std::string raw;
};

/// A wrk duration ("123.45us", "1.20ms", "2.00s") in microseconds.
inline double wrk_duration_us(const std::string& text) {
  const double v = std::strtod(text.c_str(), nullptr);
  if (text.ends_with("us")) return v;
  if (text.ends_with("ms")) return v * 1e3;
  if (text.ends_with("m")) return v * 60e6;
  if (text.ends_with("s")) return v * 1e6;
  return v;
}

/// Runs wrk against loopback:`port`; throws when it cannot be run or its output cannot be read.
/// With --pin: the CPU wrk runs on (taskset), else -1.
inline int g_wrk_cpu = -1;

/// https: the https:// scheme; close: every request with `Connection: close`.
inline bool g_wrk_https = false;
inline bool g_wrk_close = false;

inline wrk_result run_wrk(unsigned short port, int connections, int seconds) {
  const std::string pin = g_wrk_cpu < 0 ? "" : "taskset -c " + std::to_string(g_wrk_cpu) + " ";
  const std::string cmd = pin + "wrk -t1 -c" + std::to_string(connections) + " -d" + std::to_string(seconds) +
                          "s --timeout 10s --latency " + (g_wrk_close ? "-H 'Connection: close' " : "") +
                          (g_wrk_https ? "https" : "http") + "://127.0.0.1:" + std::to_string(port) + "/plaintext";
  // Not popen: wrk must not inherit this process's sockets (Asio's accepted ones are not
  // close-on-exec), since its event loop refuses descriptors numbered past its set size
  // (about 3 per connection), and with thousands of idle connections here every socket
  // it opens would be one.
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::system_error(errno, std::system_category(), "wrk: pipe");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::system_category(), "wrk: fork");
  if (pid == 0) {  // async-signal-safe calls only: this process has threads
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::close_range(3, ~0U, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  wrk_result r;
  char chunk[512];
  for (;;) {
    const ssize_t n = ::read(out[0], chunk, sizeof chunk);
    if (n > 0) {
      r.raw.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (status != 0) throw std::runtime_error("wrk failed (status " + std::to_string(status) + "):\n" + r.raw);
  std::istringstream in(r.raw);
  std::string l;
  bool rps = false, total = false;
  while (std::getline(in, l)) {
    std::istringstream words(l);
    std::string first;
    words >> first;
    if (first == "Requests/sec:") {
      words >> r.requests_per_second;
      rps = true;
    } else if (first == "50%" || first == "99%") {
      std::string d;
      words >> d;
      (first == "50%" ? r.p50_us : r.p99_us) = wrk_duration_us(d);
    } else if (first == "Socket") {  // Socket errors: connect 0, read 0, write 0, timeout 0
      std::string word;
      while (words >> word) {
        if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0]))) r.socket_errors += std::stoull(word);
      }
    } else if (first == "Non-2xx") {  // Non-2xx or 3xx responses: N
      std::string word;
      while (words >> word) {
      }
      r.non_2xx = std::stoull(word);
    } else if (l.find(" requests in ") != std::string::npos) {
      r.requests = std::stoull(first);
      total = true;
    }
  }
  if (!rps || !total) throw std::runtime_error("cannot read wrk's output:\n" + r.raw);
  return r;
}

/// `connections` wrk connections and `idle` idle ones need, beyond the hard limit where
/// this process may (CAP_SYS_RESOURCE), else to the hard limit. The server's in this
/// process; wrk, nginx and the idle clients' processes inherit it. False, after a
/// message saying by how much, when the idle connections cannot fit.
inline bool raise_fd_limit(int connections, int idle) {
  const auto needed = static_cast<rlim_t>(connections) + static_cast<rlim_t>(idle) + 256;
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < needed) {
    const rlimit want{needed, needed};
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return true;
  }
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur >= needed) return true;
  std::fprintf(stderr, "http: %s: RLIMIT_NOFILE %llu is below the %llu descriptors %d connections%s need%s\n",
               idle > 0 ? "error" : "warning", static_cast<unsigned long long>(rl.rlim_cur),
               static_cast<unsigned long long>(needed), connections,
               idle > 0 ? (" and " + std::to_string(idle) + " idle ones").c_str() : "",
               idle > 0 ? " (raise the hard limit: ulimit -Hn, or CAP_SYS_RESOURCE)" : "");
  return idle == 0;
}

/// --idle N: N keep-alive connections, each making one request and reading its response,
/// then left open and idle for the rest of the run. Their client ends live in child
/// processes forked at start (before any thread, so a child may allocate), k_per_child
/// each: the server's process holds only its own ends, and the clients' memory is not
/// the server's. Sources are spread over 127.0.0.2, .3, ...: 20,000 per address, within
/// the ~28,000 ephemeral ports one source address has toward one server port.
/// Child protocol over a socketpair: the parent sends {port}; the child opens its
/// connections and answers {0} or {errno, index}; then each byte 'c' asks how many of
/// them the server has closed or written to since (answered as an int); the parent's
/// end closing ends the child, which closes its connections.
class idle_clients {
 public:
  static constexpr int k_per_child = 15000;

  explicit idle_clients(int n) : m_n(n) {
    for (int first = 0; first < n; first += k_per_child) {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw std::system_error(errno, std::system_category(), "idle clients: socketpair");
      const pid_t pid = ::fork();
      if (pid < 0) throw std::system_error(errno, std::system_category(), "idle clients: fork");
      if (pid == 0) {
        ::close(sv[0]);
        for (const auto& c : m_children) ::close(c.fd);  // else an earlier child never sees its end close
        child(sv[1], first, std::min(n, first + k_per_child));
      }
      ::close(sv[1]);
      m_children.push_back({pid, sv[0]});
    }
  }
  ~idle_clients() {
    for (const auto& c : m_children) {
      ::close(c.fd);
      int status = 0;
      ::waitpid(c.pid, &status, 0);
    }
  }
  idle_clients(const idle_clients&) = delete;
  idle_clients& operator=(const idle_clients&) = delete;

  /// Opens every connection to `port` (the children in turn); throws on the first failure.
  void open(unsigned short port) {
    for (const auto& c : m_children) {
      if (::send(c.fd, &port, sizeof port, MSG_NOSIGNAL) != sizeof port) throw std::runtime_error("idle clients: gone");
      int reply[2] = {0, 0};
      if (::recv(c.fd, reply, sizeof reply, MSG_WAITALL) != sizeof reply)
        throw std::runtime_error("idle clients: gone");
      if (reply[0] != 0)
        throw std::system_error(reply[0], std::system_category(),
                                "idle connection " + std::to_string(reply[1] + 1) + " of " + std::to_string(m_n));
    }
  }
  /// How many the server has closed (or sent anything on) since they were opened.
  int disturbed() const {
    int total = 0;
    for (const auto& c : m_children) {
      const char ask = 'c';
      int n = 0;
      if (::send(c.fd, &ask, 1, MSG_NOSIGNAL) != 1 || ::recv(c.fd, &n, sizeof n, MSG_WAITALL) != sizeof n)
        return m_n;  // a child that died counts all of its connections
      total += n;
    }
    return total;
  }

 private:
  struct child_process {
    pid_t pid;
    int fd;
  };

  [[noreturn]] static void child(int ctl, int first, int end) {
    unsigned short port = 0;
    if (::recv(ctl, &port, sizeof port, MSG_WAITALL) != sizeof port) ::_exit(0);
    std::vector<int> fds;
    fds.reserve(static_cast<std::size_t>(end - first));
    int reply[2] = {0, 0};
    for (int i = first; i < end && reply[0] == 0; ++i) {
      reply[1] = i;
      reply[0] = open_one(port, i, fds);
    }
    (void)::send(ctl, reply, sizeof reply, MSG_NOSIGNAL);
    char ask = 0;
    while (::recv(ctl, &ask, 1, 0) == 1) {
      int n = 0;
      for (int fd : fds) {
        char ch = 0;
        const ssize_t r = ::recv(fd, &ch, 1, MSG_DONTWAIT | MSG_PEEK);
        if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ++n;
      }
      (void)::send(ctl, &n, sizeof n, MSG_NOSIGNAL);
    }
    ::_exit(0);  // the connections close with the process
  }

  // Connection i: connects from its source address, one request, its whole response.
  // 0, or the errno of what failed (ECONNRESET: closed before the response).
  static int open_one(unsigned short port, int i, std::vector<int>& fds) {
    static constexpr std::string_view k_request = "GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n";
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    fds.push_back(fd);
    const int on = 1;
    (void)::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + static_cast<std::uint32_t>(i / 20000));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src) != 0) return errno;
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) return errno;
    const timeval limit{.tv_sec = 10, .tv_usec = 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    if (::send(fd, k_request.data(), k_request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(k_request.size()))
      return errno;
    std::string got;
    while (!got.ends_with(k_body)) {
      char buf[512];
      const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r == 0) return ECONNRESET;
      if (r < 0) return errno;
      got.append(buf, static_cast<std::size_t>(r));
    }
    return 0;
  }

  int m_n;
  std::vector<child_process> m_children;
};

}  // namespace http_bench
