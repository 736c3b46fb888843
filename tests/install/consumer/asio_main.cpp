// Uses the installed weft::asio alone: a weft task awaits an Asio timer through
// use_task on an asio_executor. Includes no io_uring header.
#include <asio/steady_timer.hpp>
#include <weft/io/asio_executor.hpp>
#include <weft/io/use_task.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

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
  const int status = weft::sync_wait(io, wait_a_little(io));
  std::printf("weft asio consumer: %d\n", status);
  return status;
}
