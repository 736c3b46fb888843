// weft/detail/frame_allocator.hpp: per-thread allocator for coroutine frames.
//
// Every weft::task frame comes from here. A frame of n bytes takes stacked_size(n)
// bytes: n, then an 8-byte footer, rounded up to 64 (frames over k_max_frame go to
// ::operator new). Two sources per thread:
//
// * The thread's frame stack (the fast path): 16 MiB of address space handed out
//   bump-pointer style; only the pages frames have used are resident (mapped with
//   MAP_NORESERVE and no huge pages), so a thread that never goes deep costs a page or
//   two. The size is for deep co_await chains: frames that do not fit come from the
//   free lists and chunks, several times slower per frame (bench/README.md), and 16 MiB
//   holds ~100,000 small frames. A frame freed while it is its thread's
//   top frame (the usual case: a child ends before the parent that made it) pops the
//   top back (a joined child, whose size its joiner does not know, is found on top
//   through the footers, and spawn_many pops a run of finished children at once that
//   way: pop_finished_frame in weft/task.hpp, release_joined_frames in
//   weft/detail/bulk.hpp). A frame freed out of that order, on its own thread or
//   another, is only marked freed in its footer (a release store); the owner pops
//   marked frames when its top comes back down to them, or when the stack is full
//   (frame_stack_trim), so nothing is lost, only reused later.
//   Why a stack and not a free list: taking a frame from a list needs the list head
//   and then a load from that frame (its `next`, just written by the free before), two
//   dependent loads per allocation; a bump pointer is one. Fork-join code allocates and
//   frees a frame per task, back to back, so that chain is on every task's critical
//   path (bench/README.md compares the two).
// * Free lists, one per 64-byte size class, for frames that do not fit in the stack
//   (it is full: deep recursion, or long-lived frames pinning its top). A frame freed on
//   another thread joins the freeing thread's list; each list is capped (k_cache_limit),
//   so a producer/consumer pattern cannot grow one thread's cache without bound: past
//   the cap, frames go to a shared list per class, which allocating threads take from
//   first. New free-list frames are cut from 64 KiB chunks (no malloc header or
//   alignment padding per frame); chunks, like stacks, are never returned to the system.
//
// The footer tells the two apart when a frame is freed away from its stack's top: 0 for
// a free-list frame, else the frame's stacked size, with bit 0 set once freed.
// A thread that exits gives its stack (with any frames still alive in it) to a global
// list; the next thread that needs a stack adopts it, top and all. Stacks are never
// returned to the system (one per thread that ever allocated frames at the same time:
// 16 MiB of address space each, resident as deep as that stack was ever used).
//
// The fast paths touch only a trivially initialised thread_local (no TLS wrapper call,
// no atomic read-modify-write). Under a sanitizer both caches are bypassed so that
// ASan/TSan see every allocation; the stack protocol itself (frame_stack below) is
// exercised directly by tests/stress/frame_stack_stress.cpp, under TSan too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "weft/config.hpp"

namespace weft::detail {

inline constexpr std::size_t k_frame_granule = 64;
inline constexpr std::size_t k_frame_classes = 16;
inline constexpr std::size_t k_max_frame = k_frame_granule * k_frame_classes;  // 1 KiB
inline constexpr std::uint32_t k_cache_limit = 4096;
// Every frame starts on a cache line: clang lays a frame out for the alignment of what
// it holds (an object with an alignas(64) member, say) but allocates it through the
// promise's plain operator new, so anything up to 64 must be honoured here. It also
// keeps two frames from sharing a line.
inline constexpr std::align_val_t k_frame_alignment{64};

/// Bytes a frame of n bytes takes: the frame, its 8-byte footer, rounded up to 64.
constexpr std::size_t stacked_size(std::size_t n) noexcept {
  return (n + 8 + k_frame_granule - 1) / k_frame_granule * k_frame_granule;
}

/// The footer of the frame that ends at address `end` (its last 8 bytes).
WEFT_INLINE std::atomic_ref<std::uint64_t> footer_ending_at(std::uintptr_t end) noexcept {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(end - 8));
}

/// A frame stack's moving part: [m_top, m_end) is free. Both 0 when the thread has no
/// stack. The stack's first 64 bytes are a header whose last 8 are a zero footer, so
/// the lowest frame also has a readable "frame below" that is never marked freed.
struct frame_stack {
  std::uintptr_t m_top;
  std::uintptr_t m_end;
};

inline constexpr std::size_t k_frame_stack_bytes = std::size_t{16} << 20;  // address space; resident as used

/// Makes `block` (`bytes` long, 64-aligned) an empty frame stack.
inline void frame_stack_init(frame_stack& s, void* block, std::size_t bytes) noexcept {
  const auto base = reinterpret_cast<std::uintptr_t>(block);
  footer_ending_at(base + k_frame_granule).store(0, std::memory_order_relaxed);
  s.m_top = base + k_frame_granule;
  s.m_end = base + bytes;
}

/// Owner: whether stack `s` has room for a frame of `size` (= stacked_size(n)) bytes
/// (never for a thread without a stack: its m_top and m_end are 0).
WEFT_INLINE bool frame_stack_fits(const frame_stack& s, std::size_t size) noexcept { return s.m_top + size <= s.m_end; }

/// Owner: a frame of `size` bytes from stack `s`, which has room (frame_stack_fits).
WEFT_INLINE void* frame_stack_push_fitting(frame_stack& s, std::size_t size) noexcept {
  const std::uintptr_t top = s.m_top;
  const std::uintptr_t next = top + size;
  s.m_top = next;
  footer_ending_at(next).store(size, std::memory_order_relaxed);
  return reinterpret_cast<void*>(top);
}

/// Owner: a frame of `size` (= stacked_size(n)) bytes from stack `s`, or nullptr
/// when it has no room.
WEFT_INLINE void* frame_stack_push(frame_stack& s, std::size_t size) noexcept {
  if (!frame_stack_fits(s, size)) [[unlikely]]
    return nullptr;
  return frame_stack_push_fitting(s, size);
}

/// Whether the frame starting at `start` is the one that ends at `end`, a frame
/// boundary of a stack (its top, or the start of a frame on it): its footer holds its
/// stacked size, start to end (not yet marked freed). A frame anywhere else (the free
/// lists, ::operator new, another place on a stack) fails, as two live frames never
/// share a start. Owner of the stack only.
WEFT_INLINE bool frame_ends_at(std::uintptr_t start, std::uintptr_t end) noexcept {
  // end == 0 (no stack) fails the first test.
  return start < end && footer_ending_at(end).load(std::memory_order_relaxed) == end - start;
}

/// Owner, fast path: frees at once every frame from `start` to the top (the caller
/// found through the footers that these are exactly the frames it frees), unless the
/// frame below `start` was marked freed (the slow path pops that one too): then false,
/// nothing changed.
WEFT_INLINE bool frame_stack_cut(frame_stack& s, std::uintptr_t start) noexcept {
  // acquire: pairs with frame_stack_release's marking store (its thread is done with it).
  if ((footer_ending_at(start).load(std::memory_order_acquire) & 1) != 0) return false;
  s.m_top = start;
  return true;
}

/// Owner, fast path: pops frame `p` (`size` bytes) if it is the top of `s` and the
/// frame below it is not marked freed; else false and nothing changed.
WEFT_INLINE bool frame_stack_pop(frame_stack& s, void* p, std::size_t size) noexcept {
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  return start + size == s.m_top && frame_stack_cut(s, start);
}

/// Any thread, frame `p` (`size` bytes) is freed. Returns false when `p` is not a
/// stack frame (its footer is 0: a free-list frame, the caller's business). Otherwise:
/// when `s` (the calling thread's stack, or nullptr) has `p` on top, pops it and every
/// frame below it already marked freed; else marks `p` freed for its stack's owner.
bool frame_stack_release(frame_stack* s, void* p, std::size_t size) noexcept;

/// Owner: pops the frames at the top of `s` that were marked freed (by another thread,
/// or out of order). The allocator calls it when `s` is full: nothing else pops a top
/// frame that its owner did not free itself.
void frame_stack_trim(frame_stack& s) noexcept;

struct frame_node {
  frame_node* m_next;
};

/// One thread's cache: its frame stack and its free lists. Trivial so that the
/// thread_local needs no initialiser call.
struct frame_cache {
  frame_stack m_stack;
  frame_node* m_free[k_frame_classes];
  // Free slots left per class. Zero (the thread_local's initial value) until the thread
  // registered its exit flush at its first slow-path call, and again after that flush:
  // a free with no room left takes the slow path, so the fast path is one comparison.
  std::uint32_t m_room[k_frame_classes];
  std::uint8_t m_state;  // 0: new, 1: caching (exit flush registered), 2: thread exiting
  bool m_stack_tried;    // the thread asked for a frame stack (its first slow-path allocation)
};

extern constinit thread_local frame_cache t_frame_cache;

/// Slow paths, in src/frame_allocator.cpp.
void* allocate_frame_slow(std::size_t cls);
void release_frame_slow(void* p, std::size_t cls);

// With clang on x86-64 the fast paths call the slow ones through these preserve_most
// trampolines: the caller then needs no registers saved around a call it almost never
// makes, so a coroutine's ramp and destroy functions lose their push/pop pairs
// (fewer instructions per task: bench/README.md). They are inline and clang-only
// by name, so every caller of a given name agrees on the convention even when the
// library itself was built by another compiler.
#if defined(__clang__) && defined(__x86_64__)
[[gnu::noinline]] [[clang::preserve_most]] inline void* allocate_frame_slow_pm(std::size_t cls) {
  return allocate_frame_slow(cls);
}
[[gnu::noinline]] [[clang::preserve_most]] inline void release_frame_slow_pm(void* p, std::size_t cls) {
  release_frame_slow(p, cls);
}
#else
inline void* allocate_frame_slow_pm(std::size_t cls) { return allocate_frame_slow(cls); }
inline void release_frame_slow_pm(void* p, std::size_t cls) { release_frame_slow(p, cls); }
#endif

/// Size class of a frame of n bytes (its stacked_size).
constexpr std::size_t frame_class(std::size_t n) noexcept { return stacked_size(n) / k_frame_granule - 1; }

/// Allocates a coroutine frame of n bytes. Thread-safe (per-thread state).
WEFT_INLINE void* allocate_frame(std::size_t n) {
  if constexpr (WEFT_SANITIZED) {
    return ::operator new(n, k_frame_alignment);
  } else {
    if (stacked_size(n) > k_max_frame) return ::operator new(n, k_frame_alignment);
    // Not frame_stack_push: its nullptr would be tested again here (a frame's address
    // is never 0, but the compiler cannot know): 2 instructions a frame.
    frame_stack& s = t_frame_cache.m_stack;
    if (frame_stack_fits(s, stacked_size(n))) [[likely]]
      return frame_stack_push_fitting(s, stacked_size(n));
    return allocate_frame_slow_pm(frame_class(n));
  }
}

/// Frees a frame of n bytes obtained from allocate_frame, on any thread.
WEFT_INLINE void deallocate_frame(void* p, std::size_t n) noexcept {
  if constexpr (WEFT_SANITIZED) {
    ::operator delete(p, k_frame_alignment);
  } else {
    if (stacked_size(n) > k_max_frame) {
      ::operator delete(p, k_frame_alignment);
      return;
    }
    if (frame_stack_pop(t_frame_cache.m_stack, p, stacked_size(n))) [[likely]]
      return;
    release_frame_slow_pm(p, frame_class(n));
  }
}

/// While alive, the calling thread's new frames come from its free lists (or new
/// chunks) instead of its frame stack: for frames that will be freed out of
/// order, on other threads, long after (a scope's children, weft/scope.hpp), which would
/// otherwise pin the stack's top and let it grow to its full size under churn. Frees
/// are unaffected. Not thread-safe: a guard of the calling thread, on its stack; not
/// across a suspension.
class off_stack_frames {
 public:
  off_stack_frames() noexcept {
    frame_cache& c = t_frame_cache;
    m_end = std::exchange(c.m_stack.m_end, 0);       // nothing fits; trim sees no stack
    m_tried = std::exchange(c.m_stack_tried, true);  // nor does the slow path make one now
  }
  ~off_stack_frames() {
    frame_cache& c = t_frame_cache;
    c.m_stack.m_end = m_end;
    c.m_stack_tried = m_tried;
  }
  off_stack_frames(const off_stack_frames&) = delete;
  off_stack_frames& operator=(const off_stack_frames&) = delete;

 private:
  std::uintptr_t m_end;
  bool m_tried;
};

}  // namespace weft::detail
