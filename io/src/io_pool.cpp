// io/src/io_pool.cpp: weft::io::io_pool, a thread_pool whose workers drive one ring each
// (the design is at the top of weft/io/io_pool.hpp; the ring side is in uring_context.cpp).
#include "weft/io/io_pool.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "uring_impl.hpp"

namespace weft::io {
namespace {

// Checked before any ring is made: a bad count must not first set up thousands of rings.
std::size_t checked_threads(const pool_options& o) {
  if (o.threads == 0 || o.threads > 4096)
    throw std::invalid_argument("weft::io::io_pool: pool_options::threads must be 1..4096 (got " +
                                std::to_string(o.threads) + ")");
  return o.threads;
}

std::vector<weft::detail::worker_reactor*> reactors_of(uring_context& ctx) {
  std::vector<weft::detail::worker_reactor*> r;
  r.reserve(detail::uring_access::count(ctx));
  for (std::size_t i = 0; i < detail::uring_access::count(ctx); ++i) r.push_back(&detail::uring_access::ring(ctx, i));
  return r;
}

}  // namespace

io_pool::io_pool(pool_options pool, uring_options ring)
    : uring_context(detail::pool_mode{}, checked_threads(pool), ring), m_pool(pool, reactors_of(*this)) {}

io_pool::~io_pool() = default;  // m_pool joins the workers; then the base frees the rings

}  // namespace weft::io
