// weft/detail/split_deque.hpp: the per-worker, per-priority work deque.
//
// Protocol (a split deque, after the idea of van Dijk & van de Pol's Lace):
//
//   slots:  [ 0 ........ top ...... split ...... bottom ........ capacity )
//                stolen  | shared region | private region |   free
//
// * The owner pushes and pops at `bottom` (LIFO). Everything in [split, bottom) is
//   private: thieves never touch it, so push and pop there are plain loads and stores,
//   with no fence and no read-modify-write. A seq_cst fence costs more than the whole
//   budget of a forked task, and a locked RMW a large part of it (bench/README.md has
//   the figures), which is why a classic Chase-Lev deque (one fence per pop) is not used.
// * Thieves take from `top` (FIFO, the oldest and largest pieces of work), only in
//   the shared region [top, split). `top`, `split` and an `epoch` live in one 64-bit
//   word `m_public`; a thief claims slot `top` by a CAS that moves top to top + 1.
// * A thief that finds the shared region empty while the owner has private work sets
//   `m_split_req`. The owner polls that flag on push and pop and answers by moving
//   `split` up (share()), publishing half of its private work with a release CAS that
//   pairs with the acquire load in steal().
// * When the owner's private region is empty it pops from the shared region with a
//   CAS that moves split down (pop_shared()), racing thieves on the same word. That
//   CAS, and resetting all indices to 0 when the deque is found empty, bump `epoch`:
//   within one epoch top and split only grow, so a thief's CAS on a stale word (whose
//   slot it read before the owner reused it) always fails (no ABA).
// * The consequence of the design: private work is invisible to thieves until the
//   owner next pushes or pops. Code that is about to block a worker thread calls
//   share_all() first (weft::sync_wait does).
// * Lone items. A share that publishes the owner's only item (nothing stays private,
//   one item shared) sets the `lone` bit of the word: that item is most likely the
//   child its parent joins a few nanoseconds later (a chain of dependent tasks), and a
//   thief taking it would only make the two threads ping-pong. Thieves give a lone
//   item time before taking it (src/stealing.cpp), and the owner shares a lone item
//   only while it holds `lone credit` (worth_sharing()): the credit is spent by a lone
//   share and given back when a shared item of this deque is found stolen or when the
//   worker goes back to its loop (restore_lone_credit()). So a serial chain publishes
//   at most one item per run of its thread, while a task that forks one child and then
//   computes for long still gets its child stolen. Only forked children count: work
//   pushed for other reasons (a task woken by a channel, a yield) is shared at once and
//   never lone, since its pusher goes on running (worker_context.hpp, push_local with `plain`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "weft/config.hpp"

namespace weft::detail {

inline constexpr std::size_t k_cache_line = 64;

class split_deque {
 public:
  static constexpr std::uint32_t k_index_bits = 20;
  // Slots usable. Beyond it push() fails and the caller queues the work in the worker's
  // inbox instead (bulk forks of more children than this, or absurdly deep nesting).
  static constexpr std::uint32_t k_capacity = (1u << 16) - 1;

  split_deque() {
    // calloc of 512 KiB maps zero pages lazily: only the slots actually used cost RSS.
    m_slots = static_cast<void**>(std::calloc(std::size_t{k_capacity} + 1, sizeof(void*)));
    if (!m_slots) throw std::bad_alloc{};
  }
  ~split_deque() { std::free(m_slots); }
  split_deque(const split_deque&) = delete;
  split_deque& operator=(const split_deque&) = delete;

  /// Owner only. Returns false when full (the caller keeps the work itself).
  WEFT_INLINE bool push(void* item) noexcept {
    const std::uint32_t b = m_bottom_local;
    if (b == k_capacity) [[unlikely]]
      return false;
    slot(b).store(item, std::memory_order_relaxed);  // published by share()'s release CAS
    m_bottom_local = b + 1;
    return true;
  }

  /// Owner only, bulk push: where the next items go. The caller checked free_slots() >=
  /// n, writes the n items with put(base, i, item) (i places above the bottom), then
  /// calls commit(n). The base is a value, so a loop of puts reloads nothing that its
  /// other stores might have changed.
  WEFT_INLINE void** put_base() const noexcept { return m_slots + m_bottom_local; }
  /// Owner only: writes `item` i places above `base` (from put_base()).
  static WEFT_INLINE void put(void** base, std::size_t i, void* item) noexcept {
    std::atomic_ref<void*>(base[i]).store(item, std::memory_order_relaxed);  // published by share()'s release CAS
  }
  /// Owner only: items in the deque, private and shared (those stolen not counted).
  std::uint32_t owner_depth() const noexcept {
    const std::uint32_t t = top_of(m_public.load(std::memory_order_relaxed));
    return m_bottom_local > t ? m_bottom_local - t : 0;
  }

  /// Owner only: the n items put() wrote become the newest private items.
  WEFT_INLINE void commit(std::uint32_t n) noexcept { m_bottom_local += n; }

  /// Owner only: how many slots are still free.
  std::uint32_t free_slots() const noexcept { return k_capacity - m_bottom_local; }

  /// Owner only. The most recently pushed item, or nullptr when empty or all stolen.
  WEFT_INLINE void* pop() noexcept {
    std::uint32_t b = m_bottom_local;
    if (b > m_split) [[likely]] {
      --b;
      m_bottom_local = b;
      return slot(b).load(std::memory_order_relaxed);
    }
    return pop_shared();
  }

  /// Owner only: pops the newest item if it is private and equal to `item`; else
  /// leaves the deque as it is and returns false.
  WEFT_INLINE bool pop_if_newest(void* item) noexcept {
    const std::uint32_t b = m_bottom_local;
    if (b > m_split && slot(b - 1).load(std::memory_order_relaxed) == item) {
      m_bottom_local = b - 1;
      return true;
    }
    return false;
  }

  /// Owner only: did a thief ask for work?
  WEFT_INLINE bool share_requested() const noexcept { return m_split_req.load(std::memory_order_relaxed); }

  /// Owner only: true when the owner holds private work (nothing shared).
  bool has_private() const noexcept { return m_bottom_local > m_split; }

  /// Owner only: is answering a share request worth it now? Yes with two or more
  /// private items; with one, only while the deque holds lone credit (see above).
  WEFT_INLINE bool worth_sharing() const noexcept {
    return m_bottom_local - m_split >= 2 || (m_lone_credit && m_bottom_local > m_split);
  }

  /// Owner only: a new run of the worker loop; a lone item may be shared again.
  void restore_lone_credit() noexcept { m_lone_credit = true; }

  /// Owner only: publish half of the private region (at least one item). Returns
  /// whether anything was published. `may_be_lone` = false: the newest item is not a
  /// forked child (a wake-up, a yield): never mark it lone, whatever is left private.
  bool share(bool may_be_lone = true) noexcept {
    return share_up_to(m_split + (m_bottom_local - m_split + 1) / 2, may_be_lone);
  }

  /// Owner only: publish the whole private region (before the owner blocks).
  bool share_all() noexcept { return share_up_to(m_bottom_local); }

  /// Any thread: the public word (top, split, epoch, lone bit), for steal_from().
  /// Acquire: pairs with share()'s release, so the published slots can be read.
  std::uint64_t snapshot() const noexcept { return m_public.load(std::memory_order_acquire); }
  /// How many items snapshot `w` shows in the shared region.
  static constexpr std::uint32_t shared_count(std::uint64_t w) noexcept {
    return top_of(w) < split_of(w) ? split_of(w) - top_of(w) : 0;
  }
  /// Does snapshot `w` show exactly one shared item that was the owner's only one?
  static constexpr bool lone(std::uint64_t w) noexcept { return (w & k_lone_bit) != 0 && shared_count(w) == 1; }

  /// Any thread: take the oldest shared item of snapshot `w` (shared_count(w) > 0), or
  /// nullptr when the word changed since (someone else took it, or the owner).
  void* steal_from(std::uint64_t w) noexcept {
    const std::uint32_t t = top_of(w), s = split_of(w);
    void* item = slot(t).load(std::memory_order_relaxed);
    // acq_rel: acquire keeps the release sequence of the publishing CAS; a stale word
    // (epoch changed, slot maybe reused) fails here, so `item` is only used when valid.
    if (m_public.compare_exchange_strong(w, pack(epoch_of(w), t + 1, s), std::memory_order_acq_rel,
                                         std::memory_order_relaxed))
      return item;
    return nullptr;
  }

  /// Any thread: take the oldest shared item (lone or not), or nullptr. Never blocks.
  void* steal() noexcept {
    const std::uint64_t w = snapshot();
    if (shared_count(w) == 0) {
      request_share();  // nothing shared: ask the owner to share at its next push or pop
      return nullptr;
    }
    return steal_from(w);
  }

  /// Any thread: ask the owner to share at its next push or pop (a worker about to
  /// park does this to every deque, so that new work wakes it).
  void request_share() noexcept {
    // Test first so that idle thieves do not keep writing the owner's cache line.
    if (!m_split_req.load(std::memory_order_relaxed)) m_split_req.store(true, std::memory_order_relaxed);
  }

  /// Any thread, racy: does the shared region look non-empty?
  bool looks_stealable() const noexcept {
    const std::uint64_t w = m_public.load(std::memory_order_relaxed);
    return top_of(w) < split_of(w);
  }

  /// Any thread, seq_cst: used by a worker about to park (pairs with the seq_cst CAS
  /// in share_up_to()).
  bool stealable_seq_cst() const noexcept {
    const std::uint64_t w = m_public.load(std::memory_order_seq_cst);
    return top_of(w) < split_of(w);
  }

 private:
  static constexpr std::uint64_t k_index_mask = (std::uint64_t{1} << k_index_bits) - 1;
  // Bit 63: lone (see above). Bits 40..62: epoch. 20 bits each: top, split.
  static constexpr std::uint64_t k_lone_bit = std::uint64_t{1} << 63;
  static constexpr std::uint64_t k_epoch_mask = (std::uint64_t{1} << (63 - 2 * k_index_bits)) - 1;
  static constexpr std::uint32_t top_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>((w >> k_index_bits) & k_index_mask);
  }
  static constexpr std::uint32_t split_of(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w & k_index_mask);
  }
  static constexpr std::uint64_t epoch_of(std::uint64_t w) noexcept { return (w >> (2 * k_index_bits)) & k_epoch_mask; }
  static constexpr std::uint64_t pack(std::uint64_t e, std::uint32_t t, std::uint32_t s) noexcept {
    return ((e & k_epoch_mask) << (2 * k_index_bits)) | (std::uint64_t{t} << k_index_bits) | s;
  }

  std::atomic_ref<void*> slot(std::uint32_t i) const noexcept { return std::atomic_ref<void*>(m_slots[i]); }

  bool share_up_to(std::uint32_t ns, bool may_be_lone = true) noexcept {
    m_split_req.store(false, std::memory_order_relaxed);
    if (ns <= m_split) return false;
    std::uint64_t w = m_public.load(std::memory_order_relaxed);
    bool lone = false;
    // seq_cst: the release half publishes the slots (pairs with steal()'s acquire);
    // the total order pairs with a parking worker's seq_cst re-check.
    do {
      lone = may_be_lone && ns == m_bottom_local && ns - top_of(w) == 1;  // the only item, now shared
    } while (!m_public.compare_exchange_weak(w, pack(epoch_of(w), top_of(w), ns) | (lone ? k_lone_bit : 0),
                                             std::memory_order_seq_cst, std::memory_order_relaxed));
    if (lone) m_lone_credit = false;
    m_split = ns;
    return true;
  }

  WEFT_NOINLINE void* pop_shared() noexcept {
    std::uint64_t w = m_public.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint32_t t = top_of(w), s = split_of(w);
      const std::uint64_t e = epoch_of(w) + 1;
      if (t >= s) {
        // Empty (everything shared was stolen): restart the indices at 0 so the deque
        // stays compact. Thieves do not CAS an empty word, so this cannot fail for long.
        if (m_public.compare_exchange_weak(w, pack(e, 0, 0), std::memory_order_relaxed, std::memory_order_relaxed)) {
          m_lone_credit = true;  // sharing paid off: thieves took what was shared
          m_split = 0;
          m_bottom_local = 0;
          return nullptr;
        }
        continue;
      }
      // Take slot s-1 back from the shared region; races thieves CASing the same word.
      if (m_public.compare_exchange_weak(w, pack(e, t, s - 1), std::memory_order_relaxed, std::memory_order_relaxed)) {
        m_split = s - 1;
        m_bottom_local = s - 1;
        return slot(s - 1).load(std::memory_order_relaxed);
      }
    }
  }

  // Owner's cache line.
  alignas(k_cache_line) void** m_slots = nullptr;
  std::uint32_t m_bottom_local = 0;  // next free slot
  std::uint32_t m_split = 0;         // owner's copy of split (only the owner changes it)
  bool m_lone_credit = true;         // may share a lone item (see above)
  // Shared lines.
  alignas(k_cache_line) std::atomic<std::uint64_t> m_public{0};  // epoch | top | split
  alignas(k_cache_line) std::atomic<bool> m_split_req{false};    // a thief wants work
};

}  // namespace weft::detail
