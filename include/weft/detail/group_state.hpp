// weft/detail/group_state.hpp: the state one dispatched group shares between its
// members and runners (weft/group.hpp). Not API. The protocol is described at the top
// of src/group.cpp.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "weft/detail/split_deque.hpp"  // k_cache_line
#include "weft/executor.hpp"

namespace weft {
class group;
struct group_options;
struct index_range;
}  // namespace weft

namespace weft::detail {

struct exec_context;  // a stack that runs members: a runner's own, or a fiber (src/group.cpp)
struct runner;        // runs members, each with its own weft::group (src/group_impl.hpp)

/// The internal cancellation a member throws at its next claim/barrier after another
/// member failed. Deliberately not a std::exception; swallowed by the runtime.
struct group_cancelled {};

/// Type key of group::shared<T>: one address per type.
template <class T>
inline constexpr char type_key = 0;

using kernel_fn = void (*)(void* kernel, group& g);

inline constexpr std::size_t k_no_rearm = ~std::size_t{0};

// The barrier word: arrived (bits 0..23) | expected (24..46) | cancelled (47) | phase (48..63).
inline constexpr std::uint64_t k_arrived_mask = (std::uint64_t{1} << 24) - 1;
inline constexpr unsigned k_expected_shift = 24;
inline constexpr std::uint64_t k_expected_mask = ((std::uint64_t{1} << 23) - 1) << k_expected_shift;
inline constexpr std::uint64_t k_cancel_bit = std::uint64_t{1} << 47;
inline constexpr unsigned k_phase_shift = 48;
inline constexpr std::size_t k_max_members = (std::size_t{1} << 23) - 1;

/// What dispatch decided before anything runs.
struct group_plan {
  executor* ex = nullptr;  // null: run inline on the calling thread only
  std::uint32_t members = 1;
  std::uint32_t workers = 1;  // runners at most
  unsigned prio = 0;
  std::size_t range = 0;
  std::size_t fiber_stack = 0;
};

struct shared_entry {
  const void* key;
  void* object;
  void (*destroy)(void*) noexcept;
};

class group_state {
 public:
  group_state(const group_plan& plan, kernel_fn fn, void* kernel);
  ~group_state();
  group_state(const group_state&) = delete;
  group_state& operator=(const group_state&) = delete;

  /// group::claim's body: chunk > 0.
  index_range claim(std::size_t chunk);

  // ---- immutable after construction
  std::uint32_t m_size;
  kernel_fn m_call;
  void* m_kernel;
  std::size_t m_stack_size;

  // ---- completion (written by start_group before any runner starts)
  std::coroutine_handle<> m_awaiting;
  executor* m_home = nullptr;
  unsigned m_home_prio = 0;

  alignas(k_cache_line) std::atomic<std::uint32_t> m_refs{0};
  std::atomic<std::uint32_t> m_next_member{0};      // members handed to runners so far
  std::atomic<std::uint32_t> m_pending_runners{0};  // posted runners not started yet
  std::atomic<std::uint32_t> m_remaining;           // members not finished yet

  alignas(k_cache_line) std::atomic<std::size_t> m_next_index{0};  // claim space cursor
  std::atomic<std::size_t> m_range_end;
  std::atomic<std::size_t> m_rearm{k_no_rearm};  // next_phase's range, for the phase's completer

  alignas(k_cache_line) std::atomic<std::uint64_t> m_barrier;
  std::atomic<std::uint32_t> m_sleepers{0};  // members asleep on the barrier's futex

  alignas(k_cache_line) std::atomic<bool> m_failed{false};
  std::exception_ptr m_error;  // the first member exception; written once, before m_remaining drops

  std::vector<const void*> m_slots;  // reduce/broadcast: one value address per member, null between collectives
  std::mutex m_shared_mutex;
  std::vector<shared_entry> m_shared;  // group::shared objects, in construction order
};

// src/group.cpp
group_plan plan_group(executor& ex, const group_options& opts);
group_plan plan_inline(const group_options& opts);
group_state* make_group(const group_plan& plan, kernel_fn fn, void* kernel);
/// Starts the runners; true when the awaiting coroutine was suspended (it is resumed by
/// the member that finishes last), false when the group already finished inline.
bool start_group(group_state& s, const group_plan& plan, std::coroutine_handle<> awaiting);
/// After completion: drops the dispatcher's reference, rethrows a member's exception.
void finish_group(group_state& s);
void release(group_state& s) noexcept;
void run_inline_group(const group_plan& plan, kernel_fn fn, void* kernel);
void group_barrier(group_state& s, exec_context& ctx, std::size_t rearm, bool cancellable);
void throw_if_cancelled(const group_state& s);
[[noreturn]] void throw_zero_chunk();
[[noreturn]] void throw_bad_root(std::size_t root, std::size_t size);
[[noreturn]] void throw_root_gone(std::size_t root);

}  // namespace weft::detail
