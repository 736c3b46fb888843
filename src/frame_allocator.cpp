// src/frame_allocator.cpp: slow paths of the per-thread frame cache.
#include "weft/detail/frame_allocator.hpp"

namespace weft::detail {

constinit thread_local frame_cache t_frame_cache{};

namespace {
/// Constructed on a thread's first slow-path call: returns its cached frames at exit.
struct cache_flush {
  ~cache_flush() {
    frame_cache& c = t_frame_cache;
    c.m_state = 2;  // from now on frees bypass the cache
    for (std::size_t cls = 0; cls < k_frame_classes; ++cls) {
      while (frame_node* f = c.m_free[cls]) {
        c.m_free[cls] = f->m_next;
        ::operator delete(f, k_frame_alignment);
      }
      c.m_room[cls] = 0;
    }
  }
};
thread_local cache_flush t_flush;

void register_thread() noexcept {
  frame_cache& c = t_frame_cache;
  if (c.m_state == 0) {
    (void)&t_flush;  // odr-use: constructs the thread's flush object
    c.m_state = 1;
    for (std::size_t cls = 0; cls < k_frame_classes; ++cls) c.m_room[cls] = k_cache_limit;
  }
}
}  // namespace

void* allocate_frame_slow(std::size_t cls) {
  register_thread();
  return ::operator new((cls + 1) * k_frame_granule, k_frame_alignment);
}

void release_frame_slow(void* p, std::size_t cls) {
  register_thread();
  frame_cache& c = t_frame_cache;
  if (c.m_state != 1 || c.m_room[cls] == 0) {
    ::operator delete(p, k_frame_alignment);
    return;
  }
  auto* f = static_cast<frame_node*>(p);
  f->m_next = c.m_free[cls];
  c.m_free[cls] = f;
  --c.m_room[cls];
}

}  // namespace weft::detail
