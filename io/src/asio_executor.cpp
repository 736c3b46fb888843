// io/src/asio_executor.cpp: weft tasks on an Asio io_context's thread.
//
// Protocol: schedule() appends the coroutine to its priority's queue under m_mutex and,
// when no drain is pending yet, posts one drain() into the io_context. drain() runs on
// the I/O thread, resumes up to k_budget tasks (highest priority first), then either
// clears m_drain_posted (queues empty) or posts itself again so that Asio's completion
// handlers get their turn. The I/O thread's t_executor is this executor for its whole
// life, which is how use_task's completions know to resume inline.
#include "weft/io/asio_executor.hpp"

#include <asio/post.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace weft::io {
namespace {

constexpr int k_budget = 64;

unsigned checked_priorities(unsigned p) {
  if (p < 1 || p > 16)
    throw std::invalid_argument("weft::io::asio_executor: priorities must be 1..16 (got " + std::to_string(p) + ")");
  return p;
}

}  // namespace

asio_executor::asio_executor(asio_options options)
    : m_owned(std::make_unique<asio::io_context>(1)),
      m_context(m_owned.get()),
      m_guard(m_context->get_executor()),
      m_priorities(checked_priorities(options.priorities)),
      m_queues(m_priorities) {
  start();
}

asio_executor::asio_executor(asio::io_context& context, asio_options options)
    : m_context(&context),
      m_guard(context.get_executor()),
      m_priorities(checked_priorities(options.priorities)),
      m_queues(m_priorities) {
  start();
}

void asio_executor::start() {
  m_thread = std::thread([this] {
    weft::detail::t_executor = this;
    weft::detail::t_prio = 0;
    for (;;) {
      try {
        m_context->run();
        break;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "weft::io::asio_executor: a completion handler threw: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "weft::io::asio_executor: a completion handler threw a non-standard exception\n");
      }
    }
    weft::detail::t_executor = nullptr;
  });
}

asio_executor::~asio_executor() {
  if (owns_current_thread()) {
    std::fprintf(stderr, "weft::io::asio_executor: destroyed from its own thread (it would wait for itself)\n");
    std::abort();
  }
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
  }
  // Runs after everything queued before it; drains the task queues to the end, then stops.
  asio::post(*m_context, [this] {
    for (;;) {
      drain();
      std::lock_guard lock(m_mutex);
      bool empty = true;
      for (const auto& q : m_queues) empty = empty && q.empty();
      if (empty) break;
    }
    m_guard.reset();
    m_context->stop();
  });
  m_thread.join();
  m_life.reset();  // drains still queued in a context the user owns become no-ops
}

bool asio_executor::owns_current_thread() const noexcept { return weft::detail::t_executor == this; }

void asio_executor::schedule(std::coroutine_handle<> h, unsigned prio) {
  check_priority(*this, prio, "weft::io::asio_executor::schedule");
  std::lock_guard lock(m_mutex);
  if (m_stopping && !owns_current_thread())
    throw shutdown_error("weft::io::asio_executor: shutting down, no new work accepted");
  m_queues[prio].push_back(h.address());
  // Posted under the lock: once the drain is queued, `h` may run and its owner destroy
  // this executor; the drain (and the destructor's final one) takes the lock first, so
  // asio::post has returned by then and no longer touches the io_context.
  if (!m_drain_posted) {
    try {
      post_drain();
    } catch (...) {  // no memory: `h` is not queued after all
      m_queues[prio].pop_back();
      throw;
    }
    m_drain_posted = true;
  }
}

void asio_executor::drain() {
  for (int budget = k_budget; budget > 0; --budget) {
    void* item = nullptr;
    unsigned prio = 0;
    {
      std::lock_guard lock(m_mutex);
      while (prio < m_priorities && m_queues[prio].empty()) ++prio;
      if (prio == m_priorities) {
        m_drain_posted = false;
        return;
      }
      item = m_queues[prio].front();
      m_queues[prio].pop_front();
    }
    weft::detail::t_prio = prio;
    std::coroutine_handle<>::from_address(item).resume();
  }
  post_drain();  // m_drain_posted stays true
}

void asio_executor::post_drain() {
  asio::post(*m_context, [this, life = std::weak_ptr<void>(m_life)] {
    if (!life.expired()) drain();
  });
}

}  // namespace weft::io
