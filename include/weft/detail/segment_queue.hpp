// weft/detail/segment_queue.hpp: the element store of weft::channel. Not API.
//
// A FIFO of T in fixed-size segments (about 16 KiB each) linked head to tail. Pushing
// at the tail allocates a segment only when the tail one is full; popping the last
// element of the head segment frees it, so memory follows the backlog as consumers
// advance. One emptied segment is kept as a spare, and an empty queue rewinds into its
// single segment, so a channel that stays near empty (a bounded one, or a consumer
// keeping up) never allocates in its steady state. Not thread-safe: the channel's lock
// guards it.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace weft::detail {

template <class T>
class segment_queue {
  static constexpr std::size_t k_segment_bytes = 16 * 1024;
  static constexpr std::size_t k_per_segment = sizeof(T) * 32 > k_segment_bytes ? 32 : k_segment_bytes / sizeof(T);

  struct segment {
    segment* m_next = nullptr;
    alignas(T) unsigned char m_storage[k_per_segment * sizeof(T)];
    T* at(std::size_t i) noexcept { return std::launder(reinterpret_cast<T*>(m_storage) + i); }
    void* raw(std::size_t i) noexcept { return m_storage + i * sizeof(T); }
  };

 public:
  segment_queue() = default;
  segment_queue(const segment_queue&) = delete;
  segment_queue& operator=(const segment_queue&) = delete;
  ~segment_queue() {
    while (m_size != 0) pop_front();
    for (segment* s = m_head; s != nullptr;) delete std::exchange(s, s->m_next);
    delete m_spare;
  }

  std::size_t size() const noexcept { return m_size; }
  bool empty() const noexcept { return m_size == 0; }

  /// Appends a T built from `args`. Strong guarantee: throws (std::bad_alloc, or what
  /// T's constructor throws) with the queue unchanged.
  template <class... Args>
  void emplace_back(Args&&... args) {
    if (m_tail == nullptr || m_tail_index == k_per_segment) grow();
    ::new (m_tail->raw(m_tail_index)) T(std::forward<Args>(args)...);
    ++m_tail_index;
    ++m_size;
  }

  /// The oldest element. Precondition: !empty().
  T& front() noexcept { return *m_head->at(m_head_index); }

  /// Destroys the oldest element. Precondition: !empty().
  void pop_front() noexcept {
    m_head->at(m_head_index)->~T();
    ++m_head_index;
    if (--m_size == 0) {
      // Empty: rewind into the head segment and drop the others.
      for (segment* s = m_head->m_next; s != nullptr;) release(std::exchange(s, s->m_next));
      m_head->m_next = nullptr;
      m_tail = m_head;
      m_head_index = m_tail_index = 0;
    } else if (m_head_index == k_per_segment) {
      release(std::exchange(m_head, m_head->m_next));
      m_head_index = 0;
    }
  }

 private:
  void grow() {
    segment* s = m_spare != nullptr ? std::exchange(m_spare, nullptr) : new segment;
    s->m_next = nullptr;
    if (m_tail != nullptr) m_tail->m_next = s;
    else m_head = s;
    m_tail = s;
    m_tail_index = 0;
  }
  void release(segment* s) noexcept {
    if (m_spare == nullptr) m_spare = s;
    else delete s;
  }

  segment* m_head = nullptr;
  segment* m_tail = nullptr;
  std::size_t m_head_index = 0;  // next element to pop, in m_head
  std::size_t m_tail_index = 0;  // next free place, in m_tail
  std::size_t m_size = 0;
  segment* m_spare = nullptr;
};

}  // namespace weft::detail
