// weft/io/detail/descriptor.hpp: the owner of a socket's file descriptor, shared by the
// socket object and the operations started on it. Not API.
//
// Why. The kernel resolves an SQE's fd number when it runs the SQE, not when it was
// prepared: if a socket were closed while one of its operations is prepared but not yet
// submitted (or in flight), and anything in the process then made a socket (an accept
// on any ring, a connect), that new socket would get the same number, and the pending
// read or write would run on it: one client's bytes sent to another, or another
// client's request read. So the number is never closed while an operation that named
// it may still reach the kernel.
//
// Protocol. m_state holds a closed bit, a released bit and the count of operations
// begun. An operation calls begin() before it is handed to a ring (it fails once closed:
// the operation then ends at once, without reaching the kernel) and end() once its task
// is resumed, when every CQE of it has come. close() counts itself as an operation,
// sets the closed bit, shuts the socket down (which ends pending receives and sends at
// once; they see the bit when they resume) and ends its count: the end() that brings
// the count to zero closes the number.
// begin() and close() meet in one atomic word, so either the operation is counted
// before the close (and the number stays open until it ends) or it sees the closed bit.
// release() sets both bits: the number is handed to the caller and never closed here.
// The object itself is reference-counted (the socket object plus each operation that
// holds it), since operations may outlive the socket object.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <utility>

namespace weft::io::detail {

/// One socket's file descriptor and its operations (protocol above). Thread-safe.
class descriptor {
 public:
  /// A new owner of `fd` (one reference, held by the caller); null without memory.
  static descriptor* make(int fd) noexcept;

  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;

  int fd() const noexcept { return m_fd; }
  /// One more operation on the socket: true, and the number stays open until the
  /// matching end(); false once it is closed (or released): do not touch the number.
  bool begin() noexcept {
    std::uint32_t s = m_state.load(std::memory_order_relaxed);
    do {
      if ((s & k_closed) != 0) return false;
      // acq_rel: one modification order with close()'s fetch_or decides who comes first.
    } while (!m_state.compare_exchange_weak(s, s + k_op, std::memory_order_acq_rel, std::memory_order_relaxed));
    return true;
  }
  /// The operation begun by begin() ended (every CQE of it came). May close the number.
  void end() noexcept;
  /// Shuts the socket down, and closes the number now or when the last operation ends.
  /// For one caller (the socket object's close); idempotent.
  void close() noexcept;
  /// Gives the number up: no later operation begins, and it is never closed here.
  void release() noexcept { m_state.fetch_or(k_closed | k_released, std::memory_order_acq_rel); }
  /// True once close() or release() was called (acquire: pairs with their acq_rel).
  bool closed() const noexcept { return (m_state.load(std::memory_order_acquire) & k_closed) != 0; }

  void add_ref() noexcept { m_refs.fetch_add(1, std::memory_order_relaxed); }
  /// Drops a reference; the last one frees the object (never the number).
  void drop_ref() noexcept {
    // acq_rel: every use by other holders happens before the delete.
    if (m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  explicit descriptor(int fd) noexcept : m_fd(fd) {}
  ~descriptor() = default;

  static constexpr std::uint32_t k_closed = 1;
  static constexpr std::uint32_t k_released = 2;
  static constexpr std::uint32_t k_op = 4;  // one operation begun

  const int m_fd;
  std::atomic<std::uint32_t> m_state{0};
  std::atomic<std::uint32_t> m_refs{1};
};

/// An operation's hold on a descriptor: a reference, and the operation begun or not.
/// Moved only before begin() (awaitables are moved before they are awaited).
class descriptor_ref {
 public:
  descriptor_ref() noexcept = default;
  /// Holds `d` (may be null: a socket object without a socket).
  explicit descriptor_ref(descriptor* d) noexcept : m_desc(d) {
    if (m_desc != nullptr) m_desc->add_ref();
  }
  descriptor_ref(descriptor_ref&& o) noexcept : m_desc(o.m_desc), m_begun(o.m_begun) {
    o.m_desc = nullptr;
    o.m_begun = false;
  }
  descriptor_ref& operator=(descriptor_ref&& o) noexcept {
    if (this != &o) {
      reset();
      m_desc = std::exchange(o.m_desc, nullptr);
      m_begun = std::exchange(o.m_begun, false);
    }
    return *this;
  }
  ~descriptor_ref() { reset(); }
  /// begin() on the descriptor: 0 when the operation may go ahead; else the errno it
  /// ends with at once: EBADF without a socket, ECANCELED once it was closed. Once begun,
  /// later calls return 0 and count nothing more.
  int begin() noexcept {
    if (m_begun) return 0;  // begun already (an operation tried at once, then submitted)
    if (m_desc == nullptr) return EBADF;
    if (!m_desc->begin()) return ECANCELED;
    m_begun = true;
    return 0;
  }
  /// True when the socket was closed locally (close() or release() of its owner).
  bool closed() const noexcept { return m_desc != nullptr && m_desc->closed(); }

 private:
  void reset() noexcept {
    if (m_desc == nullptr) return;
    if (m_begun) m_desc->end();
    std::exchange(m_desc, nullptr)->drop_ref();
    m_begun = false;
  }

  descriptor* m_desc = nullptr;
  bool m_begun = false;
};

}  // namespace weft::io::detail
