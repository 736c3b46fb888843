// weft/io/signal.hpp: process signals awaited on an io_uring context.
//
//   int main() {
//     weft::io::block_signals({SIGTERM, SIGINT});  // first, before any thread starts
//     weft::io::io_pool io;
//     weft::io::signal_set sigs(io, {SIGTERM, SIGINT});
//     ... auto [ec, signo] = co_await sigs.wait(); ...
//
// A signal_set reads a signalfd through the ring of the worker (or loop) that awaits
// it. A signalfd only sees a signal that no thread takes the ordinary way, so each
// signal must be blocked in every thread of the process: block_signals() blocks them in
// the calling thread, and threads inherit the mask of the thread that starts them, so
// call it at the start of main, before any pool, context or other thread exists. The
// signal_set constructor checks the calling thread's mask and refuses a signal that is
// not blocked there (std::logic_error naming it); it cannot see other threads (a thread
// started before block_signals would still die of the signal's default action).
#pragma once

#include <csignal>
#include <initializer_list>
#include <system_error>

#include "weft/io/tcp.hpp"
#include "weft/io/uring_context.hpp"

namespace weft::io {

/// What signal_set::wait() yields: `ec` empty and the signal's number, or `ec` set
/// (error::cancelled when stopped or the set was closed, error::timed_out under
/// weft::io::with_timeout's deadline, std::errc::bad_file_descriptor on a moved-from
/// set) and `signo` 0.
struct signal_result {
  std::error_code ec;
  int signo = 0;
};

/// Blocks `signals` in the calling thread (pthread_sigmask), and so in the threads it
/// starts from now on: the first thing main does for signals a signal_set reads.
/// Throws std::invalid_argument for a signal that cannot be caught or blocked (SIGKILL,
/// SIGSTOP) or is no signal.
void block_signals(std::initializer_list<int> signals);

namespace detail {

/// wait(): one read of a signalfd_siginfo on the ring.
class signal_awaitable : public socket_awaitable {
 public:
  signal_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id) noexcept;
  signal_awaitable(signal_awaitable&& o) noexcept;
  static constexpr bool k_linked_timeout_ok = true;  // weft::io::with_timeout applies
  signal_result await_resume() const noexcept;

 private:
  unsigned char m_info[128];  // a struct signalfd_siginfo
};

}  // namespace detail

/// A set of signals read on `ctx` (either kind, as tcp_stream). Move-only; closes on
/// destruction. wait() may be awaited from several tasks at once (each signal reaches
/// one of them), from any thread; close() may be called from any thread at any time,
/// and ends the waits pending with error::cancelled. Each wait watches the awaiting
/// task's stop token (weft/stop.hpp). The context must outlive it.
class signal_set {
 public:
  /// Reads `signals` (each blocked in the calling thread already: block_signals).
  /// Throws std::invalid_argument for SIGKILL, SIGSTOP, a number that is no signal, or
  /// an empty list; std::logic_error for a signal not blocked in this thread;
  /// std::system_error when the signalfd cannot be made.
  signal_set(uring_context& ctx, std::initializer_list<int> signals);
  /// Takes over `o`'s signalfd; `o` is left closed.
  signal_set(signal_set&& o) noexcept;
  signal_set& operator=(signal_set&&) = delete;
  /// Closes the set (as close()).
  ~signal_set();

  /// Waits for the next of the set's signals: {ec, signo}. A signal that came while
  /// nobody waited is kept by the kernel (once per signal number: standard signals do
  /// not queue) and returned by the next wait().
  detail::signal_awaitable wait() noexcept { return {*m_ctx, m_desc, m_id}; }
  /// Stops reading: pending waits end with error::cancelled, later ones at once with
  /// error::cancelled; the signals stay blocked. Idempotent.
  void close() noexcept;
  /// True until close().
  bool is_open() const noexcept { return m_desc != nullptr && !m_desc->closed(); }

 private:
  uring_context* m_ctx;
  detail::descriptor* m_desc = nullptr;  // the signalfd's owner, shared with the waits
  std::uint64_t m_id = 0;                // its identity in the rings' fd maps
};

}  // namespace weft::io
