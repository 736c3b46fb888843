// io/src/buffer_pool.hpp: one ring's receive buffers (weft/io/buffer.hpp), shared by the
// sources of io/src (not installed, not API).
//
// The buffers are one anonymous mapping of count * size bytes (pages the kernel never
// wrote to cost no memory). Where the kernel has provided buffer rings, the free buffers
// sit in a buffer ring registered as group k_group: a receive SQE with
// IOSQE_BUFFER_SELECT names the group and the kernel picks one when data arrives.
// Otherwise (uring_options::provided_buffers off, or a kernel before 5.19) the loop keeps
// them in a free list and takes one when the socket is readable.
//
// Touching few buffers: the kernel takes buffers from the head of the ring and given-back
// ones go in at its tail, so a ring that held every buffer would cycle through all of them
// and make the whole mapping resident however few receives run at once. So the ring holds
// k_first_published buffers at first, and publish_more() doubles that when the kernel finds
// it empty (ENOBUFS), up to count: the resident buffers follow the most receives that ever
// held a buffer at once. The free list is a stack, for the same reason.
//
// Giving back: on the ring's loop thread, straight into the buffer ring or the free
// list; on any other thread, onto a lock-free stack (push with compare-and-swap, taken
// whole by the loop with one exchange, so no ABA) that the loop empties at its next
// poll, or at once when it finds no buffer. The pool is counted (the ring's reference
// plus one per lease), so a lease may outlive the ring: the last one unmaps it.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "weft/io/buffer.hpp"

namespace weft::io::detail {

class uring_impl;

class buffer_pool {
 public:
  /// The buffer group of every ring's pool (each ring has its own groups).
  static constexpr std::uint16_t k_group = 0;
  /// How many buffers a provided ring holds at first (or count, when fewer).
  static constexpr unsigned k_first_published = 16;

  /// The pool of ring `ring` (called on its loop thread): `count` buffers of `size`
  /// bytes; registered with the kernel when `provided` and the kernel can. Null with
  /// `err` set (ENOMEM) when the memory cannot be had.
  static buffer_pool* make(const uring_impl* owner, io_uring& ring, unsigned count, unsigned size, bool provided,
                           int& err) noexcept;

  /// True when the kernel picks the buffers (a provided buffer ring).
  bool provided() const noexcept { return m_br != nullptr; }
  std::size_t buffer_size() const noexcept { return m_size; }
  /// Buffer `id`'s memory.
  std::byte* data(std::uint16_t id) const noexcept { return at(id); }

  // ---- the loop thread --------------------------------------------------------------------
  /// Without a provided ring: a free buffer's id; false when there is none.
  bool take(std::uint16_t& id) noexcept;
  /// Back into the buffer ring or the free list.
  void give_back_here(std::uint16_t id) noexcept;
  /// Takes back what other threads gave back: how many.
  unsigned take_back_foreign() noexcept;
  /// With a provided ring: puts buffers never handed to the kernel yet into it (as many as
  /// it holds already, at most all the rest): how many (0 once every buffer is in).
  unsigned publish_more() noexcept;
  bool has_foreign() const noexcept { return m_foreign.load(std::memory_order_relaxed) != 0; }
  /// The ring is being destroyed: unregisters the buffer ring and drops the ring's
  /// reference (then the last lease frees the pool).
  void orphan(io_uring& ring) noexcept;

  // ---- any thread -----------------------------------------------------------------------------
  /// A lease of buffer `id` holding its first `n` bytes (one more reference).
  leased_buffer lease(std::uint16_t id, std::size_t n) noexcept;
  /// A lease's end: the buffer goes back (see the file comment), and its reference.
  void release(std::uint16_t id) noexcept;

 private:
  buffer_pool() = default;
  ~buffer_pool();
  void drop() noexcept;
  std::byte* at(std::uint16_t id) const noexcept { return m_mem + std::size_t{id} * m_size; }
  bool on_owner() const noexcept;

  const uring_impl* m_owner = nullptr;
  std::uint64_t m_owner_serial = 0;  // the ring's serial: addresses may be reused, serials are not
  std::byte* m_mem = nullptr;
  std::size_t m_mem_len = 0;
  std::size_t m_size = 0;
  unsigned m_count = 0;
  io_uring_buf_ring* m_br = nullptr;  // the provided buffer ring, or null
  std::size_t m_br_len = 0;
  unsigned m_mask = 0;
  unsigned m_published = 0;                 // with a provided ring: buffers 0..m_published-1 were put into it
  std::vector<std::uint16_t> m_free;        // without a provided ring: the free buffers
  std::atomic<std::uint32_t> m_foreign{0};  // stack of buffers given back elsewhere: top id + 1, 0 empty
  std::unique_ptr<std::atomic<std::uint32_t>[]> m_next;  // the stack's links (id + 1, 0 ends)
  std::atomic<bool> m_orphaned{false};
  std::atomic<std::size_t> m_refs{1};  // the ring's, plus one per lease
};

}  // namespace weft::io::detail
