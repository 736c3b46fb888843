// Uses the installed weft::uring alone: a weft task sleeps on a uring_context, and on
// an io_pool's workers, where io_uring is available. Includes no Asio header, and needs
// none.
#include <weft/io/error.hpp>
#include <weft/io/io_pool.hpp>
#include <weft/io/sleep.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <chrono>
#include <cstdio>
#include <system_error>

namespace {

weft::task<int> nap(weft::io::uring_context& ring) {
  const std::error_code ec = co_await weft::io::sleep_for(ring, std::chrono::milliseconds(1));
  co_return ec ? 1 : 0;
}

}  // namespace

int main() {
  // The weft.io error category comes with the core library.
  const std::error_code eof = weft::io::error::eof;
  try {
    weft::io::uring_context ring;
    const int status = weft::sync_wait(ring, nap(ring));
    weft::io::io_pool pool{{.threads = 2}};
    const int pool_status = weft::sync_wait(pool, nap(pool));
    std::printf("weft uring consumer: slept, %d %d (%s)\n", status, pool_status, eof.category().name());
    return status + pool_status;
  } catch (const weft::io::uring_unavailable& e) {
    std::printf("weft uring consumer: %s (%s)\n", e.what(), eof.category().name());
    return 0;
  }
}
