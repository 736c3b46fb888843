// io/src/unix.cpp: unix_endpoint, unix_stream, unix_listener and unix_datagram
// (weft/io/unix.hpp) over the stream and datagram machinery of tcp.cpp and udp.cpp.
#include "weft/io/unix.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>

namespace weft::io {

// ---- unix_endpoint --------------------------------------------------------------------------

namespace {
constexpr socklen_t k_path_offset = offsetof(sockaddr_un, sun_path);
}  // namespace

unix_endpoint unix_endpoint::path(std::string_view p) noexcept {
  unix_endpoint e;
  if (p.empty() || p.size() > max_length() || p.find('\0') != std::string_view::npos) return e;
  e.m_addr.sun_family = AF_UNIX;
  std::memcpy(e.m_addr.sun_path, p.data(), p.size());
  e.m_addr.sun_path[p.size()] = '\0';
  e.m_len = static_cast<socklen_t>(k_path_offset + p.size() + 1);
  return e;
}

unix_endpoint unix_endpoint::abstract(std::string_view name) noexcept {
  unix_endpoint e;
  if (name.size() > max_length()) return e;
  e.m_addr.sun_family = AF_UNIX;
  e.m_addr.sun_path[0] = '\0';  // the abstract marker; the name's length is in the address length
  std::memcpy(e.m_addr.sun_path + 1, name.data(), name.size());
  e.m_len = static_cast<socklen_t>(k_path_offset + 1 + name.size());
  return e;
}

unix_endpoint unix_endpoint::from(const sockaddr* a, socklen_t len) noexcept {
  unix_endpoint e;
  if (a != nullptr && len == 0) {  // recvmsg's source of a datagram from an unbound socket
    e.m_addr.sun_family = AF_UNIX;
    e.m_len = sizeof(sa_family_t);
    return e;
  }
  if (a == nullptr || len < sizeof(sa_family_t) || len > sizeof e.m_addr || a->sa_family != AF_UNIX) return e;
  std::memcpy(&e.m_addr, a, len);
  e.m_len = len;
  return e;
}

std::string unix_endpoint::name() const {
  if (m_len <= k_path_offset) return {};
  const char* const p = m_addr.sun_path;
  const std::size_t n = m_len - k_path_offset;
  if (p[0] == '\0') return {p + 1, n - 1};
  return {p, ::strnlen(p, n)};  // the kernel may or may not count the terminating NUL
}

std::string unix_endpoint::to_string() const {
  if (empty()) return "(empty endpoint)";
  if (unnamed()) return "(unnamed)";
  if (is_abstract()) return "@" + name();
  return name();
}

namespace {

std::error_code sys(int err) noexcept { return {err, std::system_category()}; }

unix_endpoint name_of(int fd, bool peer) noexcept {
  sockaddr_un a{};
  socklen_t len = sizeof a;
  if (fd < 0) return {};
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return {};
  return unix_endpoint::from(reinterpret_cast<const sockaddr*>(&a), len);
}

bool usable(const unix_endpoint& e) noexcept { return !e.empty() && !e.unnamed(); }

}  // namespace

// ---- unix_stream ----------------------------------------------------------------------------

detail::connect_awaitable unix_stream::connect(const unix_endpoint& to) noexcept {
  std::error_code early;
  if (!usable(to)) early = std::make_error_code(std::errc::invalid_argument);
  return connect_to(to.data(), to.size(), early);
}

std::error_code unix_stream::pair(unix_stream& a, unix_stream& b) noexcept {
  if (a.is_open() || b.is_open()) return std::make_error_code(std::errc::already_connected);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return sys(errno);
  a = unix_stream(a.context(), fds[0]);
  b = unix_stream(b.context(), fds[1]);
  if (!a.is_open() || !b.is_open()) {
    a.close();
    b.close();
    return std::make_error_code(std::errc::not_enough_memory);
  }
  return {};
}

unix_credentials unix_stream::peer_credentials() const noexcept {
  unix_credentials c;
  const int fd = native_handle();
  if (fd < 0) {
    c.ec = std::make_error_code(std::errc::bad_file_descriptor);
    return c;
  }
  ucred u{};
  socklen_t len = sizeof u;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &u, &len) != 0) {
    c.ec = sys(errno);
    return c;
  }
  c.pid = u.pid;
  c.uid = u.uid;
  c.gid = u.gid;
  return c;
}

unix_endpoint unix_stream::remote_endpoint() const noexcept { return name_of(native_handle(), true); }

unix_endpoint unix_stream::local_endpoint() const noexcept { return name_of(native_handle(), false); }

// ---- unix_listener --------------------------------------------------------------------------

namespace {
// unix_listener::listen's bind (an errno on failure), removing a stale socket file first
// when asked.
int prepare_unix(int fd, const void* arg) {
  const auto& [at, o] = *static_cast<const std::pair<const unix_endpoint*, const unix_listen_options*>*>(arg);
  if (o->remove_stale && !at->is_abstract()) {
    const std::string p = at->name();
    struct stat st{};
    if (::lstat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(p.c_str());
  }
  if (::bind(fd, at->data(), at->size()) != 0) return errno;
  return 0;
}
}  // namespace

std::error_code unix_listener::listen(const unix_endpoint& at, const unix_listen_options& o) noexcept {
  if (is_open()) return std::make_error_code(std::errc::already_connected);
  if (!usable(at)) return std::make_error_code(std::errc::invalid_argument);
  const std::pair<const unix_endpoint*, const unix_listen_options*> arg{&at, &o};
  return open(AF_UNIX, o.backlog, &prepare_unix, &arg);
}

unix_endpoint unix_listener::local_endpoint() const noexcept { return name_of(fd(), false); }

// ---- unix_datagram --------------------------------------------------------------------------

std::error_code unix_datagram::bind(const unix_endpoint& at) noexcept {
  if (!usable(at)) return std::make_error_code(std::errc::invalid_argument);
  if (auto ec = open(AF_UNIX)) return ec;
  return bind_to(at.data(), at.size());
}

std::error_code unix_datagram::connect(const unix_endpoint& peer) noexcept {
  if (!usable(peer)) return std::make_error_code(std::errc::invalid_argument);
  return connect_to(peer.data(), peer.size());
}

std::error_code unix_datagram::pair(unix_datagram& a, unix_datagram& b) noexcept {
  if (a.is_open() || b.is_open()) return std::make_error_code(std::errc::already_connected);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fds) != 0) return sys(errno);
  if (!a.adopt(fds[0])) {
    ::close(fds[1]);
    return std::make_error_code(std::errc::not_enough_memory);
  }
  if (!b.adopt(fds[1])) {
    a.close();
    return std::make_error_code(std::errc::not_enough_memory);
  }
  // Each one's peer is the other, unnamed: what receive() reports as `from`.
  sockaddr_un unnamed{};
  unnamed.sun_family = AF_UNIX;
  a.m_peer.set(reinterpret_cast<const sockaddr*>(&unnamed), sizeof(sa_family_t));
  b.m_peer = a.m_peer;
  return {};
}

detail::basic_datagram_awaitable<unix_endpoint> unix_datagram::send_to(const void* buf, std::size_t len,
                                                                       const unix_endpoint& to) noexcept {
  detail::socket_address a;
  a.set(to.data(), to.size());
  return op<unix_endpoint>(detail::datagram_op::send_to, const_cast<void*>(buf), len, &a);
}

unix_endpoint unix_datagram::local_endpoint() const noexcept {
  detail::socket_address a;
  if (!local_address(a)) return {};
  return unix_endpoint::from(reinterpret_cast<const sockaddr*>(&a.m_addr), a.m_len);
}

}  // namespace weft::io
