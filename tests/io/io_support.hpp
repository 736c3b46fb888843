// Helpers of the I/O tests: open-fd counting, the fd limit, a plain client socket, a bounded completion
// latch, io_uring availability (skip, not fail), the echo messages, temporary paths and a task around one
// awaitable.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/io/tcp.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace weft_io_test {

/// Open file descriptors of this process (entries of /proc/self/fd, the directory
/// iterator's own fd excluded).
inline std::size_t fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;
}

/// The fd count once it equals `expected`, or after `limit` if it never does: for the
/// closes that end asynchronously (a listener's socket is closed once its ring reaped
/// the cancelled accept; a stream's once its last operation left the kernel).
inline std::size_t settled_fd_count(std::size_t expected, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::size_t n = fd_count();
  while (n != expected && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    n = fd_count();
  }
  return n;
}

/// Raises the soft RLIMIT_NOFILE to the hard one; returns the soft limit now in force.
inline std::size_t raise_fd_limit() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return static_cast<std::size_t>(lim.rlim_cur);
}

/// A blocking connect() of `fd` to `at`; 0 or the errno of the failure. A connect that a
/// stop and continue of the process (SIGSTOP/SIGCONT, a cgroup freeze) interrupts
/// returns EINTR on a socket with SO_SNDTIMEO set, and the handshake goes on in the
/// kernel: then this waits (up to 10 s) for its outcome.
inline int connect_blocking(int fd, const weft::io::endpoint& at) {
  if (::connect(fd, at.data(), at.size()) == 0) return 0;
  if (errno != EINTR) return errno;
  pollfd p{fd, POLLOUT, 0};
  int r = 0;
  do r = ::poll(&p, 1, 10'000);
  while (r < 0 && errno == EINTR);
  if (r == 0) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

/// A plain blocking client socket connected to `at` (loopback: the handshake completes
/// in the kernel, whether or not the server has accepted yet); -1 on failure.
inline int connect_plain(const weft::io::endpoint& at) {
  const int fd = ::socket(at.data()->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect_blocking(fd, at) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Counts arrivals from any thread; the test thread waits, with a time bound, for a total.
class completion_count {
 public:
  void arrive(std::size_t n = 1) {
    std::lock_guard lock(m_mutex);
    m_count += n;
    m_cv.notify_all();
  }
  /// True when `total` arrivals happened within `limit`.
  bool wait_for(std::size_t total, std::chrono::milliseconds limit) {
    std::unique_lock lock(m_mutex);
    return m_cv.wait_for(lock, limit, [&] { return m_count >= total; });
  }
  std::size_t count() {
    std::lock_guard lock(m_mutex);
    return m_count;
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::size_t m_count = 0;
};

inline weft::task<void> no_op() { co_return; }

/// Returns once `ex` ran a task this thread queued there now: a wait on a condition,
/// not a delay. On a one-worker pool, the task running there has reached its
/// suspension by then (what its co_await handed to an I/O thread is queued there). On
/// a uring_context, every call other threads queued before it (operations they
/// started, tasks) has been taken, and the operations the loop started so far are
/// submitted before anything queued after it is taken (io/src/uring_context.cpp:
/// calls at the start of a turn, submission at its end).
inline void round_trip(weft::executor& ex) { weft::sync_wait(ex, no_op()); }

/// `o`, with the kernel features of uring_options turned off when the environment has
/// WEFT_TEST_URING_LEGACY=1: tests/CMakeLists.txt runs the io tests a second time so,
/// on the code paths of a kernel before 6.1 (no single-issuer ring, no multishot accept)
/// and before 5.19 (no provided buffer rings: receive() polls, then receives).
inline weft::io::uring_options test_ring_options(weft::io::uring_options o = {}) {
  const char* legacy = std::getenv("WEFT_TEST_URING_LEGACY");
  if (legacy != nullptr && std::string(legacy) == "1") {
    o.single_issuer = false;
    o.multishot_accept = false;
    o.provided_buffers = false;
  }
  return o;
}

/// A uring_context, or nullptr after a Catch2 WARN naming why io_uring is unavailable
/// (the calling test then returns: skipped, not failed).
inline std::unique_ptr<weft::io::uring_context> make_uring_or_skip(weft::io::uring_options o = {}) {
  try {
    return std::make_unique<weft::io::uring_context>(test_ring_options(o));
  } catch (const weft::io::uring_unavailable& e) {
    WARN("SKIPPED (io_uring unavailable): " << e.what());
    return nullptr;
  }
}

/// An io_pool with `options`, or nullptr after a Catch2 WARN naming why io_uring is
/// unavailable (the calling test then returns: skipped, not failed).
inline std::unique_ptr<weft::io::io_pool> make_io_pool_or_skip(weft::pool_options options) {
  try {
    return std::make_unique<weft::io::io_pool>(std::move(options), test_ring_options());
  } catch (const weft::io::uring_unavailable& e) {
    WARN("SKIPPED (io_uring unavailable): " << e.what());
    return nullptr;
  }
}
/// As above, with `threads` workers and the other options left as they are.
inline std::unique_ptr<weft::io::io_pool> make_io_pool_or_skip(std::size_t threads) {
  return make_io_pool_or_skip(weft::pool_options{.threads = threads});
}

/// For a child process: from now on system call `nr` fails with EPERM, in the calling
/// thread (and the threads it starts) or, with `every_thread`, in every thread of the
/// process (SECCOMP_FILTER_FLAG_TSYNC). False when the filter cannot be installed.
inline bool forbid_syscall(long nr, bool every_thread = false) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<std::uint32_t>(offsetof(seccomp_data, nr))),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  if (every_thread) return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/// For a child process: from now on io_uring_setup fails with EPERM, as under a
/// container runtime's seccomp policy. False when the filter cannot be installed.
inline bool forbid_io_uring_setup() { return forbid_syscall(__NR_io_uring_setup); }

/// The echo messages: 64 bytes that encode the connection and the message number.
inline constexpr std::size_t k_message = 64;
inline void fill_message(char* out, std::uint32_t conn, std::uint32_t seq) {
  for (std::size_t i = 0; i < k_message; ++i) out[i] = static_cast<char>((conn * 131u + seq * 7u + i) & 0xff);
  std::memcpy(out, &conn, sizeof conn);
  std::memcpy(out + sizeof conn, &seq, sizeof seq);
}

/// Everything a test run records from other threads, checked on the test thread.
struct failures {
  std::mutex m_mutex;
  std::string m_first;
  std::size_t m_count = 0;
  void add(const std::string& what) {
    std::lock_guard lock(m_mutex);
    if (m_count++ == 0) m_first = what;
  }
};

/// A fresh path in the temporary directory (`<prefix>-<pid>-<n><suffix>`), nothing at it
/// yet; whatever is at it is removed when the guard ends.
struct temp_path {
  std::string path;
  explicit temp_path(const std::string& prefix = "weft-test", const std::string& suffix = "") {
    static std::atomic<int> next{0};
    path = (std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(next.fetch_add(1)) + suffix))
               .string();
    std::filesystem::remove(path);
  }
  temp_path(const temp_path&) = delete;
  temp_path& operator=(const temp_path&) = delete;
  ~temp_path() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

/// A task that awaits one operation and returns its result: sync_wait takes tasks.
template <class A>
auto run(A a) -> weft::task<decltype(std::declval<A&>().await_resume())> {
  co_return co_await std::move(a);
}

}  // namespace weft_io_test
