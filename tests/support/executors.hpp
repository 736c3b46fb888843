// The executors every TEMPLATE_LIST_TEST_CASE body runs over (CONTRIBUTING.md,
// 'Tests run over every executor').
//
//   TEMPLATE_LIST_TEST_CASE("...", "[...]", weft_test::executor_kinds) {
//     WEFT_TEST_EXECUTOR(ex);  // `ex`: a fresh executor of this kind (a reference)
//     ...
//   }
//
// weft_test::executor_kinds: thread pools of 1, 2 and 4 workers, an asio_executor, a
// uring_context and an io_pool of 2 workers (both skipped with a WARN where io_uring is
// unavailable). It exists in
// test targets built with WEFT_TEST_IO_EXECUTORS=1, which link weft::io
// (tests/CMakeLists.txt), with weft_test::single_thread_kinds (the one-thread kinds).
// weft_test::all_executors: the thread pools alone, for bodies about the pool itself
// (stealing, worker counts, dispatch over its workers, yield_if_requested).
#pragma once

#include <weft/pool.hpp>

#include <cstddef>
#include <memory>
#include <tuple>

#if WEFT_TEST_IO_EXECUTORS
#  include <weft/io/asio_executor.hpp>
#  include <weft/io/io_pool.hpp>
#  include <weft/io/uring_context.hpp>

#  include <catch2/catch.hpp>
#endif

namespace weft_test {

/// A thread_pool fixture with `Threads` workers; make() builds a fresh pool.
template <std::size_t Threads>
struct pool_fixture {
  static constexpr std::size_t k_threads = Threads;
  static weft::thread_pool make() { return weft::thread_pool{{.threads = Threads}}; }
  static std::unique_ptr<weft::thread_pool> make_unique() {
    return std::make_unique<weft::thread_pool>(weft::pool_options{.threads = Threads});
  }
};

struct pool_1 : pool_fixture<1> {};  ///< one worker: every fork runs on the same thread
struct pool_2 : pool_fixture<2> {};  ///< as many workers as CI cores
struct pool_4 : pool_fixture<4> {};  ///< oversubscribed on CI: preemption mid-protocol

using all_executors = std::tuple<pool_1, pool_2, pool_4>;

#if WEFT_TEST_IO_EXECUTORS
/// An asio_executor: one I/O thread that runs tasks between Asio's handlers.
struct asio_kind {
  static constexpr std::size_t k_threads = 1;
  static std::unique_ptr<weft::io::asio_executor> make_unique() { return std::make_unique<weft::io::asio_executor>(); }
};

/// A uring_context: one loop thread; null (after a WARN) where io_uring is unavailable.
struct uring_kind {
  static constexpr std::size_t k_threads = 1;
  static std::unique_ptr<weft::io::uring_context> make_unique() {
    try {
      return std::make_unique<weft::io::uring_context>();
    } catch (const weft::io::uring_unavailable& e) {
      WARN("SKIPPED (io_uring unavailable): " << e.what());
      return nullptr;
    }
  }
};

/// An io_pool of two workers, each driving its own ring (deadlines, timers and
/// completions on the workers); null (after a WARN) where io_uring is unavailable.
/// The body's executor is its thread_pool (what current_executor() is in its tasks).
struct io_pool_kind {
  static constexpr std::size_t k_threads = 2;
  static std::unique_ptr<weft::io::io_pool> make_unique() {
    try {
      return std::make_unique<weft::io::io_pool>(weft::pool_options{.threads = 2});
    } catch (const weft::io::uring_unavailable& e) {
      WARN("SKIPPED (io_uring unavailable): " << e.what());
      return nullptr;
    }
  }
};

using executor_kinds = std::tuple<pool_1, pool_2, pool_4, asio_kind, uring_kind, io_pool_kind>;
/// The kinds with one thread: holding it holds every task queued there.
using single_thread_kinds = std::tuple<pool_1, asio_kind, uring_kind>;
#endif

/// The executor a body runs on: the fixture's object itself, or an io_pool's thread_pool.
template <class E>
E& executor_of(E& e) noexcept {
  return e;
}
#if WEFT_TEST_IO_EXECUTORS
inline weft::thread_pool& executor_of(weft::io::io_pool& p) noexcept { return p.pool(); }
#endif

}  // namespace weft_test

/// In a TEMPLATE_LIST_TEST_CASE body: `name`, a reference to a fresh executor of
/// TestType, alive until the end of the enclosing scope; returns from the body (a
/// skip, with the fixture's WARN) where that kind cannot run here.
#define WEFT_TEST_EXECUTOR(name)               \
  auto name##_owner = TestType::make_unique(); \
  if (!name##_owner) return;                   \
  auto& name = weft_test::executor_of(*name##_owner)
