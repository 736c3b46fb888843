// src/metrics.cpp: the snapshot of the workers' counters (weft/metrics.hpp) and its
// text form.
#include <algorithm>
#include <cstdio>

#include "pool_impl.hpp"

namespace weft {

worker_metrics& worker_metrics::operator+=(const worker_metrics& o) noexcept {
  tasks_run += o.tasks_run;
  tasks_stolen += o.tasks_stolen;
  steal_attempts += o.steal_attempts;
  parks += o.parks;
  busy += o.busy;
  parked += o.parked;
  deque_depth += o.deque_depth;
  inbox_depth += o.inbox_depth;
  io_submitted += o.io_submitted;
  io_completed += o.io_completed;
  io_in_flight += o.io_in_flight;
  return *this;
}

worker_metrics pool_metrics::total() const noexcept {
  worker_metrics sum;
  for (const auto& w : workers) sum += w;
  return sum;
}

namespace {

struct metric_name {
  const char* name;
  const char* type;
  const char* help;
  double (*value)(const worker_metrics&);
};

double seconds(std::chrono::nanoseconds ns) { return std::chrono::duration<double>(ns).count(); }

// The stable list of weft/metrics.hpp, in its order.
constexpr metric_name k_names[] = {
    {"tasks_run_total", "counter", "Work items the worker took from a queue and resumed.",
     [](const worker_metrics& w) { return static_cast<double>(w.tasks_run); }},
    {"tasks_stolen_total", "counter", "Work items taken from another worker.",
     [](const worker_metrics& w) { return static_cast<double>(w.tasks_stolen); }},
    {"steal_attempts_total", "counter", "Other workers looked at for work.",
     [](const worker_metrics& w) { return static_cast<double>(w.steal_attempts); }},
    {"parks_total", "counter", "Times the worker slept for lack of work.",
     [](const worker_metrics& w) { return static_cast<double>(w.parks); }},
    {"busy_seconds_total", "counter", "Time the worker was not parked.",
     [](const worker_metrics& w) { return seconds(w.busy); }},
    {"parked_seconds_total", "counter", "Time the worker was parked.",
     [](const worker_metrics& w) { return seconds(w.parked); }},
    {"deque_depth", "gauge", "Items queued in the worker's deques (sampled).",
     [](const worker_metrics& w) { return static_cast<double>(w.deque_depth); }},
    {"inbox_depth", "gauge", "Items posted to the worker from other threads.",
     [](const worker_metrics& w) { return static_cast<double>(w.inbox_depth); }},
    {"io_submitted_total", "counter", "Operations started on the worker's ring.",
     [](const worker_metrics& w) { return static_cast<double>(w.io_submitted); }},
    {"io_completed_total", "counter", "Operations of the worker's ring that completed.",
     [](const worker_metrics& w) { return static_cast<double>(w.io_completed); }},
    {"io_in_flight", "gauge", "Operations of the worker's ring not completed.",
     [](const worker_metrics& w) { return static_cast<double>(w.io_in_flight); }},
};

void append(std::string& out, const char* fmt, auto... args) {
  char line[256];
  const int n = std::snprintf(line, sizeof line, fmt, args...);
  if (n > 0) out.append(line, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof line - 1));
}

}  // namespace

std::string format_metrics(const pool_metrics& m) {
  std::string out;
  out.reserve(256 + m.workers.size() * std::size(k_names) * 48);
  out += "# HELP weft_uptime_seconds Time since the pool started.\n# TYPE weft_uptime_seconds gauge\n";
  append(out, "weft_uptime_seconds %.6f\n", seconds(m.uptime));
  for (const metric_name& n : k_names) {
    append(out, "# HELP weft_%s %s\n# TYPE weft_%s %s\n", n.name, n.help, n.name, n.type);
    for (std::size_t i = 0; i < m.workers.size(); ++i) {
      const double v = n.value(m.workers[i]);
      if (v == static_cast<double>(static_cast<std::uint64_t>(v)))
        append(out, "weft_%s{worker=\"%zu\"} %llu\n", n.name, i, static_cast<unsigned long long>(v));
      else
        append(out, "weft_%s{worker=\"%zu\"} %.6f\n", n.name, i, v);
    }
  }
  return out;
}

}  // namespace weft

namespace weft::detail {

pool_metrics pool_impl::metrics() const {
  pool_metrics m;
  const std::int64_t now = steady_ns();
  m.uptime = std::chrono::nanoseconds(now - m_started_ns);
  m.workers.resize(m_workers.size());
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    const worker& w = *m_workers[i];
    const worker_counters& c = w.m_counters;
    worker_metrics& out = m.workers[i];
    out.tasks_run = c.tasks_run.load(std::memory_order_relaxed);
    out.tasks_stolen = c.tasks_stolen.load(std::memory_order_relaxed);
    out.steal_attempts = c.steal_attempts.load(std::memory_order_relaxed);
    out.parks = c.parks.load(std::memory_order_relaxed);
    std::int64_t parked = c.parked_ns.load(std::memory_order_relaxed);
    const std::int64_t since = c.parked_since.load(std::memory_order_relaxed);
    if (since != 0 && now > since) parked += now - since;
    const std::int64_t started = c.started.load(std::memory_order_relaxed);
    const std::int64_t alive = started != 0 && now > started ? now - started : 0;
    parked = std::min(parked, alive);  // a park that ended between the two loads above
    out.parked = std::chrono::nanoseconds(parked);
    out.busy = std::chrono::nanoseconds(alive - parked);
    out.deque_depth = c.deque_depth.load(std::memory_order_relaxed);
    for (unsigned p = 0; p < w.m_prios; ++p) out.inbox_depth += w.m_inbox.size(p);
    if (w.m_reactor != nullptr) {
      const auto ops = w.m_reactor->operation_counts();
      out.io_submitted = ops.submitted;
      out.io_completed = ops.completed;
      out.io_in_flight = ops.submitted > ops.completed ? ops.submitted - ops.completed : 0;
    }
  }
  return m;
}

}  // namespace weft::detail

namespace weft {

pool_metrics thread_pool::metrics() const { return m_impl->metrics(); }

}  // namespace weft
