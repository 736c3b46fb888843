// The executors every TEMPLATE_LIST_TEST_CASE body runs over (CONTRIBUTING.md,
// 'Tests run over every executor').
//
//   TEMPLATE_LIST_TEST_CASE("...", "[...]", weft_test::all_executors) {
//     auto pool = TestType::make();
//     ...
//   }
#pragma once

#include <weft/pool.hpp>

#include <cstddef>
#include <tuple>

namespace weft_test {

/// A thread_pool fixture with `Threads` workers; make() builds a fresh pool.
template <std::size_t Threads>
struct pool_fixture {
  static constexpr std::size_t k_threads = Threads;
  static weft::thread_pool make() { return weft::thread_pool{{.threads = Threads}}; }
};

struct pool_1 : pool_fixture<1> {};  ///< one worker: every fork runs on the same thread
struct pool_2 : pool_fixture<2> {};  ///< as many workers as CI cores
struct pool_4 : pool_fixture<4> {};  ///< oversubscribed on CI: preemption mid-protocol

using all_executors = std::tuple<pool_1, pool_2, pool_4>;

}  // namespace weft_test
