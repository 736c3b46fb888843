// The receive buffer pool of a ring (io/src/buffer_pool.hpp).
#include "buffer_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "uring_impl.hpp"

namespace weft::io {

void leased_buffer::reset() noexcept {
  if (m_pool == nullptr) return;
  detail::buffer_pool* const pool = std::exchange(m_pool, nullptr);
  m_data = nullptr;
  m_size = 0;
  pool->release(m_id);
}

namespace detail {

namespace {

std::size_t page_round(std::size_t n) noexcept {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

void* map(std::size_t len) noexcept {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

buffer_pool* buffer_pool::make(const uring_impl* owner, io_uring& ring, unsigned count, unsigned size, bool provided,
                               int& err) noexcept {
  auto* p = new (std::nothrow) buffer_pool;
  if (p == nullptr) {
    err = ENOMEM;
    return nullptr;
  }
  p->m_owner = owner;
  p->m_owner_serial = owner->m_serial;
  p->m_size = size;
  p->m_count = count;
  p->m_mem_len = page_round(std::size_t{count} * size);
  p->m_mem = static_cast<std::byte*>(map(p->m_mem_len));
  p->m_next.reset(new (std::nothrow) std::atomic<std::uint32_t>[count]);
  if (p->m_mem == nullptr || p->m_next == nullptr) {
    delete p;
    err = ENOMEM;
    return nullptr;
  }
  for (unsigned i = 0; i < count; ++i) p->m_next[i].store(0, std::memory_order_relaxed);
  if (provided) {
    unsigned entries = 1;
    while (entries < count) entries *= 2;
    p->m_br_len = page_round(entries * sizeof(io_uring_buf));
    p->m_br = static_cast<io_uring_buf_ring*>(map(p->m_br_len));
    if (p->m_br != nullptr) {
      io_uring_buf_reg reg{};
      reg.ring_addr = reinterpret_cast<std::uintptr_t>(p->m_br);
      reg.ring_entries = entries;
      reg.bgid = k_group;
      if (io_uring_register_buf_ring(&ring, &reg, 0) == 0) {
        io_uring_buf_ring_init(p->m_br);
        p->m_mask = static_cast<unsigned>(io_uring_buf_ring_mask(entries));
        (void)p->publish_more();
        return p;
      }
      // A kernel before 5.19 (EINVAL): the free list below.
      ::munmap(p->m_br, p->m_br_len);
      p->m_br = nullptr;
    }
  }
  try {
    p->m_free.reserve(count);
  } catch (const std::bad_alloc&) {
    delete p;
    err = ENOMEM;
    return nullptr;
  }
  for (unsigned i = count; i > 0; --i) p->m_free.push_back(static_cast<std::uint16_t>(i - 1));
  return p;
}

buffer_pool::~buffer_pool() {
  if (m_br != nullptr) ::munmap(m_br, m_br_len);
  if (m_mem != nullptr) ::munmap(m_mem, m_mem_len);
}

bool buffer_pool::on_owner() const noexcept {
  const uring_impl* here = uring_impl::current();
  return here != nullptr && here->m_serial == m_owner_serial && !m_orphaned.load(std::memory_order_acquire);
}

bool buffer_pool::take(std::uint16_t& id) noexcept {
  if (m_free.empty() && take_back_foreign() == 0) return false;
  id = m_free.back();
  m_free.pop_back();
  return true;
}

void buffer_pool::give_back_here(std::uint16_t id) noexcept {
  if (m_br != nullptr) {
    io_uring_buf_ring_add(m_br, at(id), static_cast<unsigned>(m_size), id, static_cast<int>(m_mask), 0);
    io_uring_buf_ring_advance(m_br, 1);
  } else {
    m_free.push_back(id);  // never grows: reserved for every buffer
  }
}

unsigned buffer_pool::take_back_foreign() noexcept {
  std::uint32_t top = m_foreign.exchange(0, std::memory_order_acquire);
  unsigned n = 0;
  while (top != 0) {
    const auto id = static_cast<std::uint16_t>(top - 1);
    top = m_next[id].load(std::memory_order_relaxed);
    give_back_here(id);
    ++n;
  }
  return n;
}

unsigned buffer_pool::publish_more() noexcept {
  if (m_br == nullptr) return 0;
  const unsigned n = std::min(m_count - m_published, std::max(m_published, k_first_published));
  for (unsigned i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint16_t>(m_published + i);
    io_uring_buf_ring_add(m_br, at(id), static_cast<unsigned>(m_size), id, static_cast<int>(m_mask),
                          static_cast<int>(i));
  }
  io_uring_buf_ring_advance(m_br, static_cast<int>(n));
  m_published += n;
  return n;
}

void buffer_pool::orphan(io_uring& ring) noexcept {
  if (m_br != nullptr) (void)io_uring_unregister_buf_ring(&ring, k_group);
  m_orphaned.store(true, std::memory_order_release);
  drop();
}

leased_buffer buffer_pool::lease(std::uint16_t id, std::size_t n) noexcept {
  m_refs.fetch_add(1, std::memory_order_relaxed);
  return leased_buffer(this, at(id), n, id);
}

void buffer_pool::release(std::uint16_t id) noexcept {
  if (on_owner()) {
    give_back_here(id);
  } else {
    std::uint32_t top = m_foreign.load(std::memory_order_relaxed);
    do {
      m_next[id].store(top, std::memory_order_relaxed);
    } while (!m_foreign.compare_exchange_weak(top, std::uint32_t{id} + 1, std::memory_order_release,
                                              std::memory_order_relaxed));
  }
  drop();
}

void buffer_pool::drop() noexcept {
  if (m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace detail
}  // namespace weft::io
