// src/task.cpp: out-of-line pieces of task, fork and sync_wait.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <typeinfo>

#include "pool_impl.hpp"
#include "weft/detail/fork.hpp"
#include "weft/pool.hpp"
#include "weft/sync_wait.hpp"
#include "weft/task.hpp"

namespace weft::detail {

constinit thread_local const std::function<void(std::exception_ptr)>* t_unhandled_exception_hook = nullptr;

void report_detached_exception(std::exception_ptr e) noexcept {
  if (const auto* hook = t_unhandled_exception_hook) {
    try {
      (*hook)(std::move(e));
    } catch (...) {
      std::fputs("weft::thread_pool: pool_options::on_unhandled_exception threw; terminating\n", stderr);
      std::terminate();
    }
    return;
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "weft: a detached task ended with an exception: %s\n", ex.what());
  } catch (...) {
    std::fprintf(stderr, "weft: a detached task ended with a non-standard exception\n");
  }
}

void resume_at_home(executor& home, std::coroutine_handle<> parent, unsigned prio) noexcept {
  try {
    home.schedule(parent, prio < home.priorities() ? prio : 0);
  } catch (const std::exception& ex) {
    // The parent's executor refuses work (shutting down): nothing can resume it.
    std::fprintf(stderr, "weft: cannot resume a joined task on its executor (%s); it is left suspended\n", ex.what());
  }
}

[[noreturn]] void throw_bad_await(const char* what) { throw std::logic_error(what); }

void check_can_block(executor& ex) {
  if (ex.owns_current_thread())
    throw std::logic_error(
        "weft::sync_wait: called on one of the executor's own threads, which would deadlock; co_await the task "
        "instead");
  if (executor* mine = t_executor) mine->before_blocking();
}

void schedule_elsewhere(executor* target, std::coroutine_handle<> h, unsigned prio) {
  check_priority(*target, prio, "weft::spawn");
  target->schedule(h, prio);
}

executor& fallback_executor() { return default_pool(); }

}  // namespace weft::detail
