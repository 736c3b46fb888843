// weft/bounded_vector.hpp: weft::bounded_vector<T, N>, a vector of at most N elements
// stored inline (no heap), what spawn_many<N>(n, gen) evaluates to.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace weft {

/// A sequence of at most N elements of T, stored in the object itself (no heap
/// allocation), contiguous, in insertion order. Elements past size() are not
/// constructed. Adding to a full vector throws std::length_error. Not thread-safe.
/// T must be an object type (not a reference, not void).
template <class T, std::size_t N>
class bounded_vector {
  static_assert(std::is_object_v<T> && !std::is_array_v<T>, "weft::bounded_vector: T must be an object type");
  static_assert(N > 0, "weft::bounded_vector: N must be at least 1");

 public:
  using value_type = T;              ///< the element type
  using size_type = std::size_t;     ///< sizes and indices
  using reference = T&;              ///< operator[]'s result
  using const_reference = const T&;  ///< operator[]'s result (const)
  using iterator = T*;               ///< begin()/end()
  using const_iterator = const T*;   ///< begin()/end() (const)

  /// An empty vector.
  bounded_vector() noexcept {}
  // The copy and move constructors delegate to the default one: if an element's
  // constructor throws half-way, the object counts as constructed and its destructor
  // destroys the elements already copied.
  /// Copies `o`'s elements. If a copy throws, nothing is left behind (the copies made
  /// so far are destroyed) and the exception propagates.
  bounded_vector(const bounded_vector& o)
    requires std::is_copy_constructible_v<T>
      : bounded_vector() {
    for (const T& v : o) emplace_back(v);
  }
  /// Moves `o`'s elements over; `o` keeps its size, its elements moved from. A throwing
  /// move behaves as a throwing copy above.
  bounded_vector(bounded_vector&& o) noexcept(std::is_nothrow_move_constructible_v<T>)
    requires std::is_move_constructible_v<T>
      : bounded_vector() {
    for (T& v : o) emplace_back(std::move(v));
  }
  /// Destroys the elements, then copies `o`'s. If a copy throws, the vector keeps the
  /// copies made so far (basic guarantee).
  bounded_vector& operator=(const bounded_vector& o)
    requires std::is_copy_constructible_v<T>
  {
    if (this != &o) {
      clear();
      for (const T& v : o) emplace_back(v);
    }
    return *this;
  }
  /// Destroys the elements, then moves `o`'s over (`o` keeps its size); a throwing
  /// move leaves what was moved so far (basic guarantee).
  bounded_vector& operator=(bounded_vector&& o) noexcept(std::is_nothrow_move_constructible_v<T>)
    requires std::is_move_constructible_v<T>
  {
    if (this != &o) {
      clear();
      for (T& v : o) emplace_back(std::move(v));
    }
    return *this;
  }
  /// Destroys the elements (see clear()).
  ~bounded_vector() { clear(); }

  /// Number of elements.
  size_type size() const noexcept { return m_size; }
  /// True when there are none.
  bool empty() const noexcept { return m_size == 0; }
  /// N: the most elements it can hold.
  static constexpr size_type capacity() noexcept { return N; }
  /// Same as capacity().
  static constexpr size_type max_size() noexcept { return N; }

  /// Element i (i < size(), unchecked).
  T& operator[](size_type i) noexcept { return data()[i]; }
  /// Element i (i < size(), unchecked).
  const T& operator[](size_type i) const noexcept { return data()[i]; }
  /// Element i; std::out_of_range when i >= size().
  T& at(size_type i) {
    if (i >= m_size) throw std::out_of_range("weft::bounded_vector::at: index out of range");
    return data()[i];
  }
  /// Element i; std::out_of_range when i >= size().
  const T& at(size_type i) const {
    if (i >= m_size) throw std::out_of_range("weft::bounded_vector::at: index out of range");
    return data()[i];
  }
  /// The first element (not empty(), unchecked).
  T& front() noexcept { return data()[0]; }
  /// The first element (not empty(), unchecked).
  const T& front() const noexcept { return data()[0]; }
  /// The last element (not empty(), unchecked).
  T& back() noexcept { return data()[m_size - 1]; }
  /// The last element (not empty(), unchecked).
  const T& back() const noexcept { return data()[m_size - 1]; }

  /// The elements, contiguous.
  T* data() noexcept { return reinterpret_cast<T*>(m_storage); }
  /// The elements, contiguous.
  const T* data() const noexcept { return reinterpret_cast<const T*>(m_storage); }
  /// Iterator to the first element.
  iterator begin() noexcept { return data(); }
  /// Iterator past the last element.
  iterator end() noexcept { return data() + m_size; }
  /// Iterator to the first element.
  const_iterator begin() const noexcept { return data(); }
  /// Iterator past the last element.
  const_iterator end() const noexcept { return data() + m_size; }

  /// Constructs an element at the end from `args`; returns it. Throws
  /// std::length_error when full, or what T's constructor throws (nothing added).
  template <class... A>
  T& emplace_back(A&&... args) {
    if (m_size == N) [[unlikely]]
      throw std::length_error("weft::bounded_vector: full");
    T* p = std::construct_at(reinterpret_cast<T*>(m_storage) + m_size, std::forward<A>(args)...);
    ++m_size;
    return *p;
  }
  /// Copies `v` to the end (see emplace_back).
  void push_back(const T& v) { emplace_back(v); }
  /// Moves `v` to the end (see emplace_back).
  void push_back(T&& v) { emplace_back(std::move(v)); }
  /// Destroys the last element (not empty(), unchecked).
  void pop_back() noexcept { std::destroy_at(data() + --m_size); }
  /// Same size and equal elements, in order.
  friend bool operator==(const bounded_vector& a, const bounded_vector& b)
    requires std::equality_comparable<T>
  {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

  /// Destroys every element, last first (as an array's elements are destroyed; for
  /// tasks, the frames are then freed newest first, the frame allocator's fast order).
  void clear() noexcept {
    size_type n = m_size;
    m_size = 0;  // the count stays in a register across the destructor calls
    if constexpr (!std::is_trivially_destructible_v<T>) {
      while (n > 0) std::destroy_at(data() + --n);
    }
  }

 private:
  alignas(T) unsigned char m_storage[N * sizeof(T)];
  size_type m_size = 0;
};

}  // namespace weft
