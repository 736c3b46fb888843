// weft/detail/result.hpp: a task's outcome: nothing yet, a value, or an exception.
#pragma once

#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

namespace weft::detail {

template <class T>
class result {
 public:
  result() noexcept {}
  ~result() {
    if (m_state == state::value)
      std::destroy_at(&m_value);
    else if (m_state == state::error)
      std::destroy_at(&m_error);
  }
  result(const result&) = delete;
  result& operator=(const result&) = delete;

  template <class U>
  void set_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    std::construct_at(&m_value, std::forward<U>(v));
    m_state = state::value;
  }
  void set_error(std::exception_ptr e) noexcept {
    std::construct_at(&m_error, std::move(e));
    m_state = state::error;
  }
  bool has_error() const noexcept { return m_state == state::error; }
  std::exception_ptr error() const noexcept { return m_state == state::error ? m_error : nullptr; }

  /// Moves the value out, or rethrows the stored exception.
  T take() {
    if (m_state == state::error) std::rethrow_exception(m_error);
    return std::move(m_value);
  }

 private:
  enum class state : unsigned char { empty, value, error };
  union {
    T m_value;
    std::exception_ptr m_error;
  };
  state m_state = state::empty;
};

template <class T>
class result<T&> {
 public:
  void set_value(T& v) noexcept { m_ptr = std::addressof(v); }
  void set_error(std::exception_ptr e) noexcept { m_error = std::move(e); }
  bool has_error() const noexcept { return m_error != nullptr; }
  std::exception_ptr error() const noexcept { return m_error; }
  T& take() {
    if (m_error) std::rethrow_exception(m_error);
    return *m_ptr;
  }

 private:
  T* m_ptr = nullptr;
  std::exception_ptr m_error;
};

template <>
class result<void> {
 public:
  void set_error(std::exception_ptr e) noexcept { m_error = std::move(e); }
  bool has_error() const noexcept { return m_error != nullptr; }
  std::exception_ptr error() const noexcept { return m_error; }
  void take() {
    if (m_error) std::rethrow_exception(m_error);
  }

 private:
  std::exception_ptr m_error;
};

}  // namespace weft::detail
