// io/src/descriptor.cpp: a socket's fd, closed only once no operation of it can reach
// the kernel (the protocol is at the top of weft/io/detail/descriptor.hpp).
#include "weft/io/detail/descriptor.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <new>

namespace weft::io::detail {

descriptor* descriptor::make(int fd) noexcept { return new (std::nothrow) descriptor(fd); }

void descriptor::end() noexcept {
  // acq_rel: the operation's use of the number happens before the close below, and the
  // close() that set the bit happens before it too.
  const std::uint32_t old = m_state.fetch_sub(k_op, std::memory_order_acq_rel);
  if ((old & (k_closed | k_released)) == k_closed && old / k_op == 1) ::close(m_fd);
}

void descriptor::close() noexcept {
  if (closed()) return;
  // First, while the number is certainly ours: ends receives and sends in flight (and a
  // connect) at once, so that the operations holding the number end soon.
  ::shutdown(m_fd, SHUT_RDWR);
  const std::uint32_t old = m_state.fetch_or(k_closed, std::memory_order_acq_rel);
  if ((old & k_closed) == 0 && old / k_op == 0) ::close(m_fd);
}

}  // namespace weft::io::detail
