// io/src/signal.cpp: signal_set over a signalfd read on the ring (weft/io/signal.hpp).
#include "weft/io/signal.hpp"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "weft/io/error.hpp"

namespace weft::io {

namespace {

std::string signal_name(int signo) {
  const char* d = ::sigabbrev_np(signo);
  return d != nullptr ? std::string("SIG") + d : "signal " + std::to_string(signo);
}

/// The set of `signals`, each checked: catchable and a signal at all.
sigset_t checked_set(std::initializer_list<int> signals, const char* who) {
  if (signals.size() == 0) throw std::invalid_argument(std::string(who) + ": no signal given");
  sigset_t set;
  sigemptyset(&set);
  for (const int s : signals) {
    if (s == SIGKILL || s == SIGSTOP)
      throw std::invalid_argument(std::string(who) + ": " + signal_name(s) + " cannot be caught or blocked");
    if (sigaddset(&set, s) != 0)
      throw std::invalid_argument(std::string(who) + ": " + std::to_string(s) + " is no signal");
  }
  return set;
}

}  // namespace

void block_signals(std::initializer_list<int> signals) {
  const sigset_t set = checked_set(signals, "weft::io::block_signals");
  if (const int err = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0)
    throw std::system_error(err, std::system_category(), "weft::io::block_signals: pthread_sigmask");
}

signal_set::signal_set(uring_context& ctx, std::initializer_list<int> signals) : m_ctx(&ctx) {
  const sigset_t set = checked_set(signals, "weft::io::signal_set");
  sigset_t blocked;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  for (const int s : signals) {
    if (sigismember(&blocked, s) != 1)
      throw std::logic_error("weft::io::signal_set: " + signal_name(s) +
                             " is not blocked in this thread, so a signalfd would not see it (the signal's default "
                             "action would run): call weft::io::block_signals at the start of main, before any "
                             "thread is started");
  }
  const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::system_category(), "weft::io::signal_set: signalfd");
  m_desc = detail::descriptor::make(fd);
  if (m_desc == nullptr) {
    ::close(fd);
    throw std::bad_alloc();
  }
  m_id = detail::new_socket_id();
}

signal_set::signal_set(signal_set&& o) noexcept
    : m_ctx(o.m_ctx), m_desc(std::exchange(o.m_desc, nullptr)), m_id(std::exchange(o.m_id, 0)) {}

signal_set::~signal_set() {
  close();
  if (m_desc != nullptr) m_desc->drop_ref();
}

void signal_set::close() noexcept {
  // Closed first (no wait begins after this: it ends with cancelled), then the waits in
  // flight are cancelled (a signalfd has no shutdown that would end them).
  detail::close_and_cancel(*m_ctx, m_desc, m_id);
}

namespace detail {

signal_awaitable::signal_awaitable(uring_context& ctx, descriptor* d, std::uint64_t id) noexcept
    : socket_awaitable(ctx, d) {
  m_op.m_kind = op_kind::read;
  m_op.m_fd = d != nullptr ? d->fd() : -1;
  m_op.m_socket = id;
  m_op.m_buf = m_info;
  m_op.m_len = sizeof m_info;
}

signal_awaitable::signal_awaitable(signal_awaitable&& o) noexcept : socket_awaitable(std::move(o)) {
  m_op.m_buf = m_info;  // its own buffer, not the moved-from one's
}

signal_result signal_awaitable::await_resume() const noexcept {
  if (m_op.m_res == static_cast<int>(sizeof(signalfd_siginfo))) {
    signalfd_siginfo info;
    std::memcpy(&info, m_info, sizeof info);
    return {{}, static_cast<int>(info.ssi_signo)};
  }
  if (m_desc.closed() || m_op.m_res == -ECANCELED) {
    if (m_op.m_timed_out) return {make_error_code(error::timed_out), 0};
    return {make_error_code(error::cancelled), 0};
  }
  if (m_op.m_res < 0) return {std::error_code(-m_op.m_res, std::system_category()), 0};
  return {std::make_error_code(std::errc::io_error), 0};  // a short read: not from a signalfd
}

}  // namespace detail

}  // namespace weft::io
