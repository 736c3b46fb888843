// Uses the installed weft: a task that forks two children, run to completion.
#include <weft/weft.hpp>

#include <cstdio>

namespace {

weft::task<int> leaf(int value) { co_return value; }

weft::task<int> answer() {
  auto [a, b] = co_await weft::spawn_tuple(leaf(40), leaf(2));
  co_return a + b;
}

}  // namespace

int main() {
  weft::thread_pool pool{{.threads = 2}};
  int const value = weft::sync_wait(pool, answer());
  std::printf("weft %s consumer: %d\n", WEFT_VERSION_STRING, value);  // weft.hpp brings version.hpp
  return value == 42 ? 0 : 1;
}
