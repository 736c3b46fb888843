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
  // Counted as one more operation for the shutdown below, so that the number stays ours
  // through it (begin fails once closed: idempotent).
  if (!begin()) return;
  // The closed bit before the shutdown: an operation that the shutdown ends (a receive
  // with 0 bytes, a send with EPIPE) then sees it when its task resumes, and reports a
  // local close (error::cancelled), never the peer's end.
  m_state.fetch_or(k_closed, std::memory_order_acq_rel);
  // Ends receives and sends in flight (and a connect) at once, so that the operations
  // holding the number end soon.
  ::shutdown(m_fd, SHUT_RDWR);
  end();  // closes the number unless an operation still holds it
}

}  // namespace weft::io::detail
