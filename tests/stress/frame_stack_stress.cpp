// Stress test of the frame stack under weft's frame allocator
// (weft/detail/frame_allocator.hpp): one owner pushes frames and frees them in and out
// of stack order while other threads free frames it handed them; no live frame may ever
// be handed out again, and once everything is freed the whole stack must be reusable.
// The frames carry a byte pattern that every holder checks, so a frame reused while
// alive shows up as a changed pattern (and, under ThreadSanitizer, as a race: the test
// drives the same functions the allocator does, so it runs with the sanitizers too).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "weft/detail/frame_allocator.hpp"

namespace {

using weft::detail::frame_ends_at;
using weft::detail::frame_stack;
using weft::detail::frame_stack_cut;
using weft::detail::frame_stack_init;
using weft::detail::frame_stack_pop;
using weft::detail::frame_stack_push;
using weft::detail::frame_stack_release;
using weft::detail::frame_stack_trim;
using weft::detail::stacked_size;

struct block {
  explicit block(std::size_t n) : bytes(n), p(::operator new(n, std::align_val_t{64})) {}
  ~block() { ::operator delete(p, std::align_val_t{64}); }
  block(const block&) = delete;
  block& operator=(const block&) = delete;
  std::size_t bytes;
  void* p;
};

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Frees frame p of `size` bytes as the allocator does: the fast pop, else the slow path.
void free_frame(frame_stack* s, void* p, std::size_t size) {
  if (s != nullptr && frame_stack_pop(*s, p, size)) return;
  REQUIRE(frame_stack_release(s, p, size));
}

struct frame {
  void* p = nullptr;
  std::size_t size = 0;  // stacked size
  unsigned char tag = 0;
};

void fill(const frame& f) { std::memset(f.p, f.tag, f.size - 8); }
bool intact(const frame& f) {
  const auto* b = static_cast<const unsigned char*>(f.p);
  for (std::size_t i = 0; i + 8 < f.size; ++i)
    if (b[i] != f.tag) return false;
  return true;
}

/// Single-producer single-consumer ring handing frames to a remote thread. The owner's
/// release store of `m_write` publishes the frame's contents; the remote advances
/// `m_read` before it reads the frame, so that store does not order the remote's
/// later reads before the owner's reuse of the memory: only the frame stack's own
/// release/acquire pair does.
struct ring {
  static constexpr std::size_t k_size = 1024;
  frame m_items[k_size];
  std::atomic<std::size_t> m_write{0}, m_read{0};
  bool try_push(const frame& f) {
    const std::size_t w = m_write.load(std::memory_order_relaxed);
    if (w - m_read.load(std::memory_order_acquire) == k_size) return false;
    m_items[w % k_size] = f;
    m_write.store(w + 1, std::memory_order_release);
    return true;
  }
  bool try_pop(frame& f) {
    const std::size_t r = m_read.load(std::memory_order_relaxed);
    if (r == m_write.load(std::memory_order_acquire)) return false;
    f = m_items[r % k_size];
    m_read.store(r + 1, std::memory_order_release);
    return true;
  }
};

}  // namespace

TEST_CASE("frame stack: pops in stack order, marks out of order, reclaims marked frames", "[stress][frame_stack]") {
  block b(4096);
  frame_stack s{};
  frame_stack_init(s, b.p, b.bytes);
  const std::uintptr_t empty_top = s.m_top;
  REQUIRE(empty_top == addr(b.p) + 64);

  void* a = frame_stack_push(s, stacked_size(100));  // 128 bytes
  void* c = frame_stack_push(s, stacked_size(150));  // 192 bytes
  void* d = frame_stack_push(s, stacked_size(10));   // 64 bytes
  REQUIRE(addr(a) == empty_top);
  REQUIRE(addr(c) == addr(a) + 128);
  REQUIRE(addr(d) == addr(c) + 192);
  REQUIRE(addr(a) % 64 == 0);

  // In order: plain pops.
  REQUIRE(frame_stack_pop(s, d, 64));
  REQUIRE(s.m_top == addr(c) + 192);
  REQUIRE_FALSE(frame_stack_pop(s, a, 128));  // not the top: nothing changes
  REQUIRE(s.m_top == addr(c) + 192);

  // Out of order: `a` is only marked; freeing `c` (the top) then pops both.
  REQUIRE(frame_stack_release(&s, a, 128));
  REQUIRE(s.m_top == addr(c) + 192);
  REQUIRE_FALSE(frame_stack_pop(s, c, 192));  // the frame below is marked: slow path
  REQUIRE(frame_stack_release(&s, c, 192));
  REQUIRE(s.m_top == empty_top);

  // frame_ends_at (a frame's place found through the footers, its size unknown): true
  // only for the frame that ends at the boundary asked about, not once marked freed.
  a = frame_stack_push(s, 128);
  c = frame_stack_push(s, 192);
  REQUIRE(frame_ends_at(addr(c), s.m_top));
  REQUIRE_FALSE(frame_ends_at(addr(a), s.m_top));
  REQUIRE(frame_ends_at(addr(a), addr(c)));
  REQUIRE_FALSE(frame_ends_at(addr(c) + 64, s.m_top));  // inside the top frame
  REQUIRE_FALSE(frame_ends_at(addr(c), 0));             // no stack
  REQUIRE(frame_stack_release(&s, a, 128));             // marked: bit 0 of its footer
  REQUIRE_FALSE(frame_ends_at(addr(a), addr(c)));
  free_frame(&s, c, 192);
  REQUIRE(s.m_top == empty_top);

  // frame_stack_cut: frees every frame from a start to the top at once, unless the
  // frame below that start is marked freed.
  a = frame_stack_push(s, 128);
  c = frame_stack_push(s, 192);
  d = frame_stack_push(s, 64);
  REQUIRE(frame_stack_cut(s, addr(c)));  // c and d
  REQUIRE(s.m_top == addr(c));
  c = frame_stack_push(s, 192);
  REQUIRE(frame_stack_release(&s, a, 128));  // a marked
  REQUIRE_FALSE(frame_stack_cut(s, addr(c)));
  REQUIRE(s.m_top == addr(c) + 192);
  free_frame(&s, c, 192);  // pops c, then the marked a
  REQUIRE(s.m_top == empty_top);

  // A frame freed by another thread (no stack of its own there) is marked the same way.
  a = frame_stack_push(s, 128);
  c = frame_stack_push(s, 192);
  std::thread([&] { REQUIRE(frame_stack_release(nullptr, a, 128)); }).join();
  free_frame(&s, c, 192);
  REQUIRE(s.m_top == empty_top);
  // ... also the top frame: only trimming (the allocator does it when full) pops it.
  a = frame_stack_push(s, 128);
  c = frame_stack_push(s, 192);
  std::thread([&] {
    REQUIRE(frame_stack_release(nullptr, c, 192));
    REQUIRE(frame_stack_release(nullptr, a, 128));
  }).join();
  REQUIRE(s.m_top == addr(c) + 192);
  frame_stack_trim(s);
  REQUIRE(s.m_top == empty_top);

  // Full: push fails without changing anything; everything comes back.
  std::vector<void*> frames;
  while (void* p = frame_stack_push(s, 256)) frames.push_back(p);
  REQUIRE(frames.size() == (4096 - 64) / 256);
  const std::uintptr_t full_top = s.m_top;
  REQUIRE(frame_stack_push(s, 256) == nullptr);
  REQUIRE(s.m_top == full_top);
  for (std::size_t i = 0; i < frames.size(); i += 2) REQUIRE(frame_stack_release(&s, frames[i], 256));
  for (std::size_t i = frames.size(); i-- > 0;)
    if (i % 2 == 1) free_frame(&s, frames[i], 256);
  REQUIRE(s.m_top == empty_top);

  // A frame that is not a stack frame (footer 0) is left to the caller.
  block heap(128);
  std::memset(heap.p, 0, 128);
  REQUIRE_FALSE(frame_stack_release(&s, heap.p, 128));
  REQUIRE_FALSE(frame_stack_release(nullptr, heap.p, 128));
}

TEST_CASE("frame stack: owner and remote threads free in any order; no live frame is reused", "[stress][frame_stack]") {
  constexpr int k_remotes = 2;
  constexpr std::size_t k_pushes = 60'000;
  block b(256 * 1024);
  frame_stack s{};
  frame_stack_init(s, b.p, b.bytes);
  const std::uintptr_t empty_top = s.m_top;

  std::vector<ring> rings(k_remotes);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> remotes;
  for (int r = 0; r < k_remotes; ++r) {
    remotes.emplace_back([&, r] {
      std::vector<frame> held;
      std::mt19937 rng(1000u + static_cast<unsigned>(r));
      for (;;) {
        frame f;
        const bool got = rings[r].try_pop(f);
        if (got) held.push_back(f);
        // Free a held frame now and then, in random order.
        if (!held.empty() && (!got || rng() % 3 == 0)) {
          const std::size_t i = rng() % held.size();
          if (!intact(held[i])) bad.fetch_add(1, std::memory_order_relaxed);
          if (!frame_stack_release(nullptr, held[i].p, held[i].size)) bad.fetch_add(1, std::memory_order_relaxed);
          held[i] = held.back();
          held.pop_back();
        }
        if (!got && held.empty() && done.load(std::memory_order_acquire) &&
            rings[r].m_read.load(std::memory_order_relaxed) == rings[r].m_write.load(std::memory_order_acquire))
          return;
      }
    });
  }

  std::mt19937 rng(7);
  std::vector<frame> live;  // the owner's frames, in push order
  unsigned char tag = 1;
  std::size_t pushed = 0, full = 0;
  for (std::size_t op = 0; pushed < k_pushes; ++op) {
    REQUIRE(op < 100 * k_pushes);  // remote threads free what they hold: room comes back
    // Mostly stack order, as fork-join code frees; now and then out of order.
    const unsigned what = rng() % 16;
    if (what < 8 || live.empty()) {
      frame f;
      f.size = stacked_size(rng() % 1000);
      f.p = frame_stack_push(s, f.size);
      if (f.p == nullptr) {  // full: pop what others freed at the top, as the allocator does
        frame_stack_trim(s);
        f.p = frame_stack_push(s, f.size);
      }
      if (f.p == nullptr) {  // still full (the allocator then uses its free lists): make room
        ++full;
        if (live.empty()) std::this_thread::yield();  // the top is a remote thread's: let it free it
        for (int k = 0; k < 8 && !live.empty(); ++k) {
          REQUIRE(intact(live.back()));
          free_frame(&s, live.back().p, live.back().size);
          live.pop_back();
        }
        continue;
      }
      f.tag = tag;
      tag = static_cast<unsigned char>(tag == 255 ? 1 : tag + 1);
      fill(f);
      live.push_back(f);
      ++pushed;
    } else if (what < 13) {  // free the newest (the top, once marked frames above are popped)
      REQUIRE(intact(live.back()));
      free_frame(&s, live.back().p, live.back().size);
      live.pop_back();
    } else if (what < 14) {  // free any of ours, out of order
      const std::size_t i = rng() % live.size();
      REQUIRE(intact(live[i]));
      free_frame(&s, live[i].p, live[i].size);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {  // hand one to a remote thread
      const std::size_t i = rng() % live.size();
      if (rings[rng() % k_remotes].try_push(live[i])) live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (op % 4096 == 0)
      for (const frame& f : live) REQUIRE(intact(f));
  }
  for (const frame& f : live) REQUIRE(intact(f));
  while (!live.empty()) {
    free_frame(&s, live.back().p, live.back().size);
    live.pop_back();
  }
  done.store(true, std::memory_order_release);
  for (auto& t : remotes) t.join();
  REQUIRE(bad.load() == 0);
  INFO("stack full " << full << " times");

  // Everything is freed: trimming pops every frame still marked.
  frame_stack_trim(s);
  REQUIRE(s.m_top == empty_top);
}

TEST_CASE("frame cache: a thread that only frees frames gets no frame stack; its first allocation does",
          "[frame_stack]") {
  using namespace weft::detail;
  constexpr std::size_t cls = 1;
  constexpr std::size_t size = (cls + 1) * k_frame_granule;
  // A free-list frame, made as allocate_frame_slow makes one when the stack is full.
  void* const p = ::operator new(size, k_frame_alignment);
  footer_ending_at(addr(p) + size).store(0, std::memory_order_relaxed);
  bool stack_after_free = true;
  bool stack_after_alloc = false;
  bool from_stack = false;
  std::thread([&] {
    release_frame_slow(p, cls);  // into this new thread's free list
    stack_after_free = t_frame_cache.m_stack.m_end != 0;
    void* const q = allocate_frame_slow(cls);
    const frame_stack s = t_frame_cache.m_stack;
    stack_after_alloc = s.m_end != 0;
    from_stack = addr(q) >= s.m_end - weft::detail::k_frame_stack_bytes && addr(q) < s.m_end;
    if (!frame_stack_pop(t_frame_cache.m_stack, q, size)) release_frame_slow(q, cls);
  }).join();  // its exit frees p (the free list) and hands the stack on
  CHECK_FALSE(stack_after_free);
  CHECK(stack_after_alloc);
  CHECK(from_stack);
}

TEST_CASE("frame cache: frames no thread keeps are shared, and taken before new ones are cut", "[frame_stack]") {
  using namespace weft::detail;
  constexpr std::size_t cls = 12;  // no other test of this binary uses it
  constexpr std::size_t n = k_cache_limit + 1000;
  std::vector<void*> made(n);
  std::thread([&] {
    const off_stack_frames guard;  // no frame stack: every frame is a free-list frame
    for (void*& p : made) p = allocate_frame_slow(cls);
  }).join();
  // Another thread frees them all: its list keeps k_cache_limit, the rest go to the shared
  // list at once, and the kept ones at its exit.
  std::thread([&] {
    for (void* p : made) release_frame_slow(p, cls);
  }).join();
  std::vector<void*> again(n);
  std::thread([&] {
    const off_stack_frames guard;
    for (void*& p : again) p = allocate_frame_slow(cls);
    for (void* p : again) release_frame_slow(p, cls);
  }).join();
  const std::set<void*> first(made.begin(), made.end());
  const std::set<void*> second(again.begin(), again.end());
  CHECK(first.size() == n);
  CHECK(second == first);  // every one reused, none cut anew, none handed out twice
  for (void* p : made) CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
}
