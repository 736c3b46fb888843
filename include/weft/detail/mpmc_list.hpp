// weft/detail/mpmc_list.hpp: the element store of an unbounded weft::channel: a
// lock-free multi-producer multi-consumer FIFO in fixed-size blocks. Not API.
//
// Positions count pushes (tail) and pulls (head); position p lives in slot p % k_lap of
// block p / k_lap, and the last position of each lap is not a slot but a sentinel that
// says "the next block is being linked". Both counters are kept shifted left by one:
// the low bit of `tail` is the closed flag, that of `head` says "tail is known to be in
// a later block" (so a pull need not read `tail`). A push claims its position with one
// CAS on `tail`, builds the element in its slot and sets the slot's `written` bit; the
// push that claims a block's last slot links the next block (allocated before the
// claim, so that running out of memory throws with nothing claimed) and moves `tail`
// past the sentinel. A pull claims with one CAS on `head` when `head` is behind `tail`,
// waits for the `written` bit (the claim and the write are a few instructions apart),
// moves the element out and sets the slot's `read` bit.
//
// A block is freed once every slot of it was read. The pull of a block's last slot
// retires it: it takes the list of blocks retired before, frees those whose slots all
// say `read` (and this one, if so) and puts the others back, to be checked at the next
// retirement. Nobody touches a block after its slot in it says `read`: pushes and pulls
// only dereference a block after their claim in it succeeded. One freed block is kept
// as a spare for the next link, so a channel that stays short does not allocate.
//
// Where blocks come from: operator new while the list is short; once the backlog is
// longer than a few blocks, they are cut in turn from 2 MiB chunks mapped with
// transparent huge pages advised (one page fault per chunk instead of one per 4 KiB: a
// producer far ahead of its consumers spends its time pushing, not faulting). A chunk
// counts the blocks cut from it that are still in use, plus one while blocks are still
// being cut from it, and is unmapped when that drops to 0.
//
// Memory order: claims are seq_cst: a pull that finds `head` behind `tail` claims and
// then waits for the element, so a push's claim, not its write, is what a parked
// consumer's second look sees (the Dekker pattern of weft/channel.hpp); the `written`
// and `read` bits are plain release stores, so a push or a pull is one locked
// instruction.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "weft/detail/mpmc_ring.hpp"  // store_status
#include "weft/detail/spin_lock.hpp"  // cpu_relax

namespace weft::detail {

template <class T>
class mpmc_list {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "weft::channel<T>: over-aligned T is not supported");

  // Positions per lap: about 4 KiB of elements per block, 16 to 1024 positions.
  static constexpr std::uint64_t k_lap = std::clamp<std::uint64_t>(std::bit_floor(4096 / sizeof(T) + 1), 16, 1024);
  static constexpr std::uint64_t k_block_cap = k_lap - 1;  // the last position is the sentinel
  static constexpr std::uint64_t k_shift = 1;
  static constexpr std::uint64_t k_closed = 1;    // low bit of tail
  static constexpr std::uint64_t k_has_next = 1;  // low bit of head
  static constexpr std::uint8_t k_written = 1, k_read = 2;

  struct chunk {
    std::atomic<std::size_t> m_refs;
  };

  struct block {
    std::atomic<block*> m_next{nullptr};
    block* m_retired_next = nullptr;  // in the retired list
    chunk* m_chunk = nullptr;         // cut from this chunk, or operator new'ed
    std::atomic<std::uint8_t> m_state[k_block_cap];
    alignas(T) unsigned char m_storage[k_block_cap * sizeof(T)];

    block() noexcept {
      for (auto& s : m_state) s.store(0, std::memory_order_relaxed);
    }
    void* raw(std::uint64_t i) noexcept { return m_storage + i * sizeof(T); }
    T* value(std::uint64_t i) noexcept { return std::launder(reinterpret_cast<T*>(raw(i))); }
  };

 public:
  mpmc_list() : m_head_block(new block), m_tail_block(m_head_block.load(std::memory_order_relaxed)) {}
  mpmc_list(const mpmc_list&) = delete;
  mpmc_list& operator=(const mpmc_list&) = delete;
  /// Destroys the elements still stored. Nothing may use the list any more.
  ~mpmc_list() {
    std::uint64_t head = m_head.load(std::memory_order_relaxed) >> k_shift;
    const std::uint64_t tail = m_tail.load(std::memory_order_relaxed) >> k_shift;
    block* b = m_head_block.load(std::memory_order_relaxed);
    for (; head != tail; ++head) {
      const std::uint64_t offset = head % k_lap;
      if (offset == k_block_cap) {
        block* n = b->m_next.load(std::memory_order_relaxed);
        free_block(b);
        b = n;
      } else {
        b->value(offset)->~T();
      }
    }
    free_block(b);
    for (block* r = m_retired.load(std::memory_order_relaxed); r != nullptr;)
      free_block(std::exchange(r, r->m_retired_next));
    free_block(m_spare.load(std::memory_order_relaxed));
    if (m_cutting != nullptr) drop(m_cutting);
  }

  /// Pushes T(std::forward<U>(v)): ok or closed; `v` is used only when the result is
  /// ok. Never blocks. Thread-safe. Throws std::bad_alloc when a block cannot be
  /// allocated; then nothing was pushed. Building T must not throw (weft::channel
  /// builds a T first when it could).
  template <class U>
    requires std::is_nothrow_constructible_v<T, U&&>
  store_status try_push(U&& v) {
    std::uint64_t tail = m_tail.load(std::memory_order_acquire);
    block* b = m_tail_block.load(std::memory_order_acquire);
    block* fresh = nullptr;  // the next block, when this push may take the last slot
    for (unsigned spins = 0, losses = 0;; ++spins) {
      if ((tail & k_closed) != 0) [[unlikely]] {
        release(fresh);
        return store_status::closed;
      }
      const std::uint64_t offset = (tail >> k_shift) % k_lap;
      if (offset == k_block_cap) {  // another push is linking the next block
        backoff(spins);
        tail = m_tail.load(std::memory_order_acquire);
        b = m_tail_block.load(std::memory_order_acquire);
        continue;
      }
      if (offset + 1 == k_block_cap && fresh == nullptr) [[unlikely]]
        fresh = acquire_block();  // may throw: nothing claimed yet
      if (m_tail.compare_exchange_weak(tail, tail + (1 << k_shift), std::memory_order_seq_cst,
                                       std::memory_order_acquire)) {
        if (offset + 1 == k_block_cap) {
          m_tail_block.store(fresh, std::memory_order_release);
          m_tail.fetch_add(1 << k_shift, std::memory_order_release);  // past the sentinel
          b->m_next.store(fresh, std::memory_order_release);
          fresh = nullptr;
        }
        ::new (b->raw(offset)) T(std::forward<U>(v));
        b->m_state[offset].store(k_written, std::memory_order_release);
        release(fresh);
        return store_status::ok;
      }
      cas_backoff(losses);
      b = m_tail_block.load(std::memory_order_acquire);
    }
  }

  /// Moves the oldest element into `out(T&&)` and destroys it: ok, empty or closed
  /// (closed and drained). `out` must not throw. Never blocks, but for the few
  /// instructions between a push's claim and its write. Thread-safe.
  template <class Out>
  store_status try_pop(Out&& out) noexcept {
    std::uint64_t head = m_head.load(std::memory_order_acquire);
    block* b = m_head_block.load(std::memory_order_acquire);
    for (unsigned spins = 0, losses = 0;; ++spins) {
      const std::uint64_t offset = (head >> k_shift) % k_lap;
      if (offset == k_block_cap) {  // another pull is moving to the next block
        backoff(spins);
        head = m_head.load(std::memory_order_acquire);
        b = m_head_block.load(std::memory_order_acquire);
        continue;
      }
      std::uint64_t new_head = head + (1 << k_shift);
      if ((head & k_has_next) == 0) {
        const std::uint64_t tail = m_tail.load(std::memory_order_seq_cst);
        if ((head >> k_shift) == (tail >> k_shift))
          return (tail & k_closed) != 0 ? store_status::closed : store_status::empty;
        if ((head >> k_shift) / k_lap != (tail >> k_shift) / k_lap) new_head |= k_has_next;
      }
      if (m_head.compare_exchange_weak(head, new_head, std::memory_order_seq_cst, std::memory_order_acquire)) {
        if (offset + 1 == k_block_cap) {  // the block's last slot: head moves to the next block
          block* n = wait_next(*b);
          std::uint64_t next_head = (new_head & ~k_has_next) + (1 << k_shift);
          if (n->m_next.load(std::memory_order_relaxed) != nullptr) next_head |= k_has_next;
          m_head_block.store(n, std::memory_order_release);
          m_head.store(next_head, std::memory_order_release);
        }
        std::atomic<std::uint8_t>& state = b->m_state[offset];
        for (unsigned w = 0; (state.load(std::memory_order_acquire) & k_written) == 0; ++w) backoff(w);
        T* p = b->value(offset);
        out(std::move(*p));
        p->~T();
        if (offset + 1 == k_block_cap)
          retire(b);
        else
          state.store(k_written | k_read, std::memory_order_release);  // the last touch of b
        return store_status::ok;
      }
      cas_backoff(losses);
      b = m_head_block.load(std::memory_order_acquire);
    }
  }

  /// Closes the list: every later push reports closed. True the first time.
  bool close() noexcept { return (m_tail.fetch_or(k_closed, std::memory_order_seq_cst) & k_closed) == 0; }
  /// True once close() was called.
  bool closed() const noexcept { return (m_tail.load(std::memory_order_seq_cst) & k_closed) != 0; }

  /// Elements stored (claimed by pushes, not yet by pulls): a snapshot.
  std::size_t size() const noexcept {
    const std::uint64_t h = real(m_head.load(std::memory_order_seq_cst) >> k_shift);
    const std::uint64_t t = real(m_tail.load(std::memory_order_seq_cst) >> k_shift);
    return t > h ? static_cast<std::size_t>(t - h) : 0;
  }

 private:
  /// Slots (not sentinels) before position p.
  static std::uint64_t real(std::uint64_t p) noexcept { return p - p / k_lap; }

  /// Waiting for another thread's few instructions: spin, then give the CPU away (it may
  /// be the one that thread needs).
  static void backoff(unsigned spins) noexcept {
    if (spins < 64)
      cpu_relax();
    else
      std::this_thread::yield();
  }

  static block* wait_next(block& b) noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (block* n = b.m_next.load(std::memory_order_acquire)) return n;
      backoff(spins);
    }
  }

  /// The pull of `b`'s last slot is done: frees the retired blocks (and `b`) whose
  /// slots were all read, keeps the others retired (see the file comment).
  void retire(block* b) noexcept {
    block* keep = nullptr;
    block* check = m_retired.exchange(nullptr, std::memory_order_acquire);
    b->m_retired_next = check;
    for (block* x = b; x != nullptr;) {
      block* next = x->m_retired_next;
      if (all_read(*x)) {
        release(x);
      } else {
        x->m_retired_next = keep;
        keep = x;
      }
      x = next;
    }
    while (keep != nullptr) {  // back into the retired list
      block* next = keep->m_retired_next;
      keep->m_retired_next = m_retired.load(std::memory_order_relaxed);
      while (!m_retired.compare_exchange_weak(keep->m_retired_next, keep, std::memory_order_release,
                                              std::memory_order_relaxed)) {
      }
      keep = next;
    }
  }
  /// Every slot but the last (whose pull retires the block) says `read`.
  static bool all_read(block& b) noexcept {
    for (std::uint64_t i = 0; i + 1 < k_block_cap; ++i)
      if ((b.m_state[i].load(std::memory_order_acquire) & k_read) == 0) return false;
    return true;
  }

  // Chunks: 2 MiB, a cache line of header, then blocks at a cache-line stride; used only
  // when a chunk holds many blocks.
  static constexpr std::size_t k_chunk_bytes = std::size_t{2} << 20;  // also the huge page size
  static constexpr std::size_t k_chunk_header = 64;
  static constexpr std::size_t k_block_stride = (sizeof(block) + 63) / 64 * 64;
  static constexpr std::size_t k_blocks_per_chunk = (k_chunk_bytes - k_chunk_header) / k_block_stride;
  static constexpr bool k_use_chunks = k_blocks_per_chunk >= 16;
  static constexpr std::uint64_t k_chunk_backlog = 8 * k_block_cap;  // elements

  /// A block for the next link (a producer, before its claim): the spare, else a new one.
  block* acquire_block() {
    if (block* b = m_spare.exchange(nullptr, std::memory_order_acquire)) {
      b->m_next.store(nullptr, std::memory_order_relaxed);
      for (auto& s : b->m_state) s.store(0, std::memory_order_relaxed);
      return b;
    }
    if constexpr (k_use_chunks) {
      const std::uint64_t t = real(m_tail.load(std::memory_order_relaxed) >> k_shift);
      const std::uint64_t h = real(m_head.load(std::memory_order_relaxed) >> k_shift);
      if (t > h && t - h >= k_chunk_backlog) return cut_block();
    }
    return new block;
  }
  /// A block that is no longer used: it becomes the spare, and the old spare is freed.
  void release(block* b) noexcept {
    if (b != nullptr) free_block(m_spare.exchange(b, std::memory_order_acq_rel));
  }
  static void free_block(block* b) noexcept {
    if (b == nullptr) return;
    chunk* c = b->m_chunk;
    if (c == nullptr) {
      delete b;
    } else {
      b->~block();
      drop(c);
    }
  }

  /// The next block of the chunk being cut (a new chunk when there is none or it is
  /// used up). Throws std::bad_alloc when no chunk can be mapped.
  block* cut_block() {
    std::lock_guard lock(m_cut_lock);
    if (m_cutting == nullptr || m_cut == k_blocks_per_chunk) {
      auto* c = ::new (map_huge()) chunk{1};  // the cutter's reference
      if (m_cutting != nullptr) drop(m_cutting);
      m_cutting = c;
      m_cut = 0;
    }
    void* at = reinterpret_cast<unsigned char*>(m_cutting) + k_chunk_header + m_cut++ * k_block_stride;
    m_cutting->m_refs.fetch_add(1, std::memory_order_relaxed);
    block* b = ::new (at) block;
    b->m_chunk = m_cutting;
    return b;
  }
  static void drop(chunk* c) noexcept {
    // acq_rel: every use of the chunk's blocks happened before it is unmapped.
    if (c->m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      c->~chunk();
      ::munmap(c, k_chunk_bytes);
    }
  }

  /// One huge page of fresh memory, aligned, with transparent huge pages advised.
  static void* map_huge() {
    constexpr std::size_t padded = 2 * k_chunk_bytes;
    void* raw = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto begin = reinterpret_cast<std::uintptr_t>(raw);
    const auto aligned = (begin + k_chunk_bytes - 1) & ~(std::uintptr_t{k_chunk_bytes} - 1);
    if (aligned != begin) ::munmap(raw, aligned - begin);  // trim the unaligned head and tail
    const std::uintptr_t end = aligned + k_chunk_bytes;
    if (begin + padded != end) ::munmap(reinterpret_cast<void*>(end), begin + padded - end);
    ::madvise(reinterpret_cast<void*>(aligned), k_chunk_bytes, MADV_HUGEPAGE);  // advice only
    return reinterpret_cast<void*>(aligned);
  }

  alignas(64) std::atomic<std::uint64_t> m_head{0};
  std::atomic<block*> m_head_block;
  alignas(64) std::atomic<std::uint64_t> m_tail{0};
  std::atomic<block*> m_tail_block;
  alignas(64) std::atomic<block*> m_spare{nullptr};
  std::atomic<block*> m_retired{nullptr};  // used up, some slot's pull not finished yet
  spin_lock m_cut_lock;                    // guards the two below
  chunk* m_cutting = nullptr;              // the chunk blocks are being cut from
  std::size_t m_cut = 0;                   // blocks cut from it
};

}  // namespace weft::detail
