// src/frame_allocator.cpp: slow paths of the per-thread frame cache
// (weft/detail/frame_allocator.hpp): getting a frame stack, popping frames marked
// freed, the free lists, and handing a stack on when its thread exits.
#include "weft/detail/frame_allocator.hpp"

#include <sys/mman.h>

#include <mutex>
#include <new>

namespace weft::detail {

constinit thread_local frame_cache t_frame_cache{};

namespace {

/// Stacks of threads that exited, with whatever frames are still alive in them; a new
/// thread adopts one before making a new stack. Linked through the stacks' own headers
/// (their first 64 bytes, below the sentinel footer), so handing one on needs no
/// memory. Never destroyed: threads may exit (and frames be freed) during static
/// destruction.
struct orphan_header {
  std::uintptr_t m_top;  // the stack's top when its thread exited
  orphan_header* m_next;
};
static_assert(sizeof(orphan_header) <= k_frame_granule - 8, "must stay below the header's sentinel footer");
struct orphan_stacks {
  std::mutex m_mutex;
  orphan_header* m_head = nullptr;
};
orphan_stacks& orphans() {
  static orphan_stacks* const list = new orphan_stacks;
  return *list;
}

/// Where free-list frames come from: 64 KiB chunks cut into frames, never given back to
/// the system (as frame stacks are not). Not ::operator new per frame: a 64-byte aligned
/// allocation costs malloc about 56 bytes of padding and header on top of the frame, a
/// tenth of a 640-byte frame, and long-lived frames (a server's connections, each a
/// scope child) are exactly the ones that land here. Frames that no thread's list has
/// room for go to a shared list per class, which allocating threads take from before
/// they cut new ones, so a producer/consumer pattern reuses its frames instead of
/// growing without bound.
constexpr std::size_t k_chunk_bytes = 64 * 1024;
struct shared_frames {
  std::mutex m_mutex;
  frame_node* m_head[k_frame_classes] = {};
};
shared_frames& shared() {
  static shared_frames* const list = new shared_frames;  // never destroyed, as orphans()
  return *list;
}
struct chunk_cursor {  // the calling thread's current chunk
  std::uintptr_t m_at;
  std::uintptr_t m_end;
};
constinit thread_local chunk_cursor t_chunk{};

/// A frame of class `cls` (size bytes) for a free list: a shared one, else cut from the
/// thread's chunk. Null when no memory is left.
void* take_frame(std::size_t cls, std::size_t size) noexcept {
  {
    shared_frames& sh = shared();
    std::lock_guard lock(sh.m_mutex);
    if (frame_node* f = sh.m_head[cls]) {
      sh.m_head[cls] = f->m_next;
      return f;
    }
  }
  chunk_cursor& c = t_chunk;
  if (c.m_end - c.m_at < size) {  // the tail left (under 1 KiB) is not used
    void* const chunk = ::operator new(k_chunk_bytes, k_frame_alignment, std::nothrow);
    if (chunk == nullptr) return nullptr;
    c.m_at = reinterpret_cast<std::uintptr_t>(chunk);
    c.m_end = c.m_at + k_chunk_bytes;
  }
  void* const p = reinterpret_cast<void*>(c.m_at);
  c.m_at += size;
  return p;
}

/// A free-list frame that no thread's list keeps: onto the shared list of its class.
void give_frame(void* p, std::size_t cls) noexcept {
  auto* f = static_cast<frame_node*>(p);
  shared_frames& sh = shared();
  std::lock_guard lock(sh.m_mutex);
  f->m_next = sh.m_head[cls];
  sh.m_head[cls] = f;
}

/// Constructed on a thread's first slow-path call: at thread exit, returns the cached
/// free-list frames and hands the frame stack to the orphan list.
struct cache_flush {
  ~cache_flush() {
    frame_cache& c = t_frame_cache;
    c.m_state = 2;  // from now on frees bypass the free lists
    const frame_stack s = c.m_stack;
    c.m_stack = {};  // frees of its frames now mark them, like any other thread's
    if (s.m_end != 0) {
      auto* h = reinterpret_cast<orphan_header*>(s.m_end - k_frame_stack_bytes);
      h->m_top = s.m_top;
      orphan_stacks& o = orphans();
      std::lock_guard lock(o.m_mutex);
      h->m_next = o.m_head;
      o.m_head = h;
    }
    for (std::size_t cls = 0; cls < k_frame_classes; ++cls) {
      while (frame_node* f = c.m_free[cls]) {
        c.m_free[cls] = f->m_next;
        give_frame(f, cls);
      }
      c.m_room[cls] = 0;
    }
  }
};
thread_local cache_flush t_flush;

/// A thread's first slow-path call: registers its exit flush and opens its free lists.
void register_thread() noexcept {
  frame_cache& c = t_frame_cache;
  if (c.m_state != 0) return;
  (void)&t_flush;  // odr-use: constructs the thread's flush object
  c.m_state = 1;
  for (std::size_t cls = 0; cls < k_frame_classes; ++cls) c.m_room[cls] = k_cache_limit;
}

/// A thread's first allocation through the slow path (a registered thread that is not
/// exiting, once): gives it a frame stack, an exited thread's or a new one. Only
/// allocating threads get one: a thread that only frees frames (an I/O loop resuming
/// tasks made elsewhere) never reserves the 16 MiB.
void acquire_stack(frame_cache& c) noexcept {
  c.m_stack_tried = true;
  {
    orphan_stacks& o = orphans();
    std::lock_guard lock(o.m_mutex);
    if (orphan_header* h = o.m_head) {
      o.m_head = h->m_next;
      c.m_stack.m_top = h->m_top;
      c.m_stack.m_end = reinterpret_cast<std::uintptr_t>(h) + k_frame_stack_bytes;
      return;
    }
  }
  // Address space only: pages become resident as frames reach them. No huge pages: one
  // would make the first frame cost 2 MiB of RSS per thread.
  void* const block =
      ::mmap(nullptr, k_frame_stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (block == MAP_FAILED) return;                         // no stack; every frame comes from the free lists
  ::madvise(block, k_frame_stack_bytes, MADV_NOHUGEPAGE);  // advice only: failure is harmless
  frame_stack_init(c.m_stack, block, k_frame_stack_bytes);
}

}  // namespace

bool frame_stack_release(frame_stack* s, void* p, std::size_t size) noexcept {
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::atomic_ref<std::uint64_t> footer = footer_ending_at(start + size);
  const std::uint64_t f = footer.load(std::memory_order_relaxed);
  if (f == 0) return false;  // a free-list frame
  if (s != nullptr && start + size == s->m_top) {
    // Our top frame, with frames already marked freed below it: pop them all.
    s->m_top = start;
    frame_stack_trim(*s);
    return true;
  }
  // Not on top (or another thread's stack): mark it; the owner pops it when its top
  // comes down to it. release: this thread is done with the frame's memory.
  footer.store(f | 1, std::memory_order_release);
  return true;
}

void frame_stack_trim(frame_stack& s) noexcept {
  if (s.m_end == 0) return;
  std::uintptr_t top = s.m_top;
  for (;;) {
    // acquire: pairs with frame_stack_release's marking store (its thread is done).
    const std::uint64_t below = footer_ending_at(top).load(std::memory_order_acquire);
    if ((below & 1) == 0) break;  // a live frame, or the stack's header
    top -= below & ~std::uint64_t{1};
  }
  s.m_top = top;
}

void* allocate_frame_slow(std::size_t cls) {
  register_thread();
  frame_cache& c = t_frame_cache;
  if (!c.m_stack_tried && c.m_state == 1) acquire_stack(c);
  const std::size_t size = (cls + 1) * k_frame_granule;
  if (void* p = frame_stack_push(c.m_stack, size)) return p;  // the thread's first frame
  frame_stack_trim(c.m_stack);                                // full: frames at the top may have been freed elsewhere
  if (void* p = frame_stack_push(c.m_stack, size)) return p;
  if (frame_node* f = c.m_free[cls]) {
    c.m_free[cls] = f->m_next;
    ++c.m_room[cls];
    return f;
  }
  void* p = take_frame(cls, size);
  if (p == nullptr) throw std::bad_alloc();
  footer_ending_at(reinterpret_cast<std::uintptr_t>(p) + size).store(0, std::memory_order_relaxed);
  return p;
}

void release_frame_slow(void* p, std::size_t cls) {
  frame_cache& c = t_frame_cache;
  const std::size_t size = (cls + 1) * k_frame_granule;
  if (frame_stack_release(c.m_stack.m_end != 0 ? &c.m_stack : nullptr, p, size)) return;
  register_thread();
  if (c.m_state != 1 || c.m_room[cls] == 0) {
    give_frame(p, cls);
    return;
  }
  auto* f = static_cast<frame_node*>(p);
  f->m_next = c.m_free[cls];
  c.m_free[cls] = f;
  --c.m_room[cls];
}

}  // namespace weft::detail
