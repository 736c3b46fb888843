// Uses the installed weft::io: a weft task awaits an Asio timer through use_task on an
// asio_executor, and a uring_context is set up where io_uring is available.
#include <asio/steady_timer.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <cstdio>

namespace {

weft::task<int> wait_a_little(weft::io::asio_executor& io) {
  asio::steady_timer t(io.context(), std::chrono::milliseconds(1));
  const std::error_code ec = co_await t.async_wait(weft::io::use_task);
  co_return ec ? 1 : 0;
}

}  // namespace

int main() {
  weft::io::asio_executor io;
  const int asio_status = weft::sync_wait(io, wait_a_little(io));
  try {
    weft::io::uring_context ring;
    std::printf("weft io consumer: asio %d, io_uring available\n", asio_status);
  } catch (const weft::io::uring_unavailable& e) {
    std::printf("weft io consumer: asio %d, %s\n", asio_status, e.what());
  }
  return asio_status;
}
