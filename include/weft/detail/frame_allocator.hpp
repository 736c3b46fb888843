// weft/detail/frame_allocator.hpp: per-thread recycling allocator for coroutine frames.
//
// Every weft::task frame comes from here. Frames are rounded up to a 64-byte size
// class (up to k_max_frame bytes; bigger frames go to ::operator new). Each thread
// keeps one singly linked free list per class. A frame freed on another thread than
// the one that allocated it simply joins the freeing thread's list: memory migrates
// between threads, which is harmless, and each list is capped (k_cache_limit) so a
// producer/consumer pattern cannot grow one thread's cache without bound; frames over
// the cap go back to ::operator delete.
//
// The fast path touches only a trivially initialised thread_local (no TLS wrapper
// call, no atomic). Under a sanitizer the cache is bypassed so ASan/TSan see every
// allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

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

struct frame_node {
  frame_node* m_next;
};

/// One thread's free lists. Trivial so that the thread_local needs no initialiser call.
struct frame_cache {
  frame_node* m_free[k_frame_classes];
  // Free slots left per class. Zero (the thread_local's initial value) until the thread
  // registered its exit flush at its first slow-path call, and again after that flush:
  // a free with no room left takes the slow path, so the fast path is one comparison.
  std::uint32_t m_room[k_frame_classes];
  std::uint8_t m_state;  // 0: new, 1: caching (exit flush registered), 2: thread exiting
};

extern constinit thread_local frame_cache t_frame_cache;

/// Slow paths, in src/frame_allocator.cpp.
void* allocate_frame_slow(std::size_t cls);
void release_frame_slow(void* p, std::size_t cls);

// With clang on x86-64 the fast paths call the slow ones through these preserve_most
// trampolines: the caller then needs no registers saved around a call it almost never
// makes, so a coroutine's ramp and destroy functions lose their push/pop pairs
// (callgrind: fib -2.3 %, skynet -1.9 % instructions). They are inline and clang-only
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

constexpr std::size_t frame_class(std::size_t n) noexcept {
  return (n + k_frame_granule - 1) / k_frame_granule - 1;
}

/// Allocates a coroutine frame of n bytes. Thread-safe (per-thread state).
WEFT_INLINE void* allocate_frame(std::size_t n) {
  if constexpr (WEFT_SANITIZED) {
    return ::operator new(n, k_frame_alignment);
  } else {
    if (n > k_max_frame) return ::operator new(n, k_frame_alignment);
    const std::size_t cls = frame_class(n);
    frame_cache& c = t_frame_cache;
    if (frame_node* f = c.m_free[cls]) [[likely]] {
      c.m_free[cls] = f->m_next;
      ++c.m_room[cls];
      return f;
    }
    return allocate_frame_slow_pm(cls);
  }
}

/// Frees a frame of n bytes obtained from allocate_frame, on any thread.
WEFT_INLINE void deallocate_frame(void* p, std::size_t n) noexcept {
  if constexpr (WEFT_SANITIZED) {
    ::operator delete(p, k_frame_alignment);
  } else {
    if (n > k_max_frame) {
      ::operator delete(p, k_frame_alignment);
      return;
    }
    const std::size_t cls = frame_class(n);
    frame_cache& c = t_frame_cache;
    if (c.m_room[cls] == 0) [[unlikely]] {
      release_frame_slow_pm(p, cls);
      return;
    }
    auto* f = static_cast<frame_node*>(p);
    f->m_next = c.m_free[cls];
    c.m_free[cls] = f;
    --c.m_room[cls];
  }
}

}  // namespace weft::detail
