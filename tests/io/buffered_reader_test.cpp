// weft/io/buffered_reader.hpp: lines, exact counts and what is there, read through a
// buffer of fixed size from a loopback tcp_stream (on a uring_context and an io_pool)
// and from scripted streams: delimiters split across reads, lines at and over the
// limit, the end of the stream mid-line, stops, and no byte lost or reordered under any
// mix of calls and chunk sizes.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <weft/io/io.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "io_support.hpp"

using namespace std::chrono_literals;
using weft::io::buffered_reader;
using weft::io::endpoint;
using weft::io::io_result;
using weft::io::line_result;
using weft::io::tcp_stream;

namespace {

// ---- a loopback connection --------------------------------------------------------------

struct connection {
  tcp_stream writer;  // the client end
  tcp_stream reader;  // the accepted end, read through a buffered_reader
};

weft::task<std::error_code> connect_to(tcp_stream& s, endpoint at) { co_return co_await s.connect(at); }

weft::task<connection> connect_pair(weft::io::uring_context& io) {
  weft::io::tcp_listener l(io);
  if (auto ec = l.listen(endpoint::loopback(0))) throw std::system_error(ec, "listen");
  tcp_stream c(io);
  auto connecting = weft::spawn(connect_to(c, l.local_endpoint())).fork();
  auto [aec, s] = co_await l.accept();
  const std::error_code cec = co_await connecting;
  if (aec) throw std::system_error(aec, "accept");
  if (cec) throw std::system_error(cec, "connect");
  (void)c.set_no_delay(true);  // each small write its own segment
  co_return connection{std::move(c), std::move(s)};
}

weft::task<io_result> send_text(tcp_stream& s, std::string text) {
  co_return co_await s.write_all(text.data(), text.size());
}

// Writes `text` one byte per write, pausing between them so that most reach the reader
// as reads of their own; then shuts the write side down when `then_close`.
weft::task<void> write_bytewise(weft::io::uring_context& io, tcp_stream& s, std::string text, bool then_close) {
  for (const char c : text) {
    if ((co_await s.write_all(&c, 1)).ec) throw std::runtime_error("write failed");
    co_await weft::io::sleep_for(io, 200us);
  }
  if (then_close) (void)s.shutdown(SHUT_WR);
}

// A body run once on a uring_context and once on a two-worker io_pool (each skipped,
// with a warning, where io_uring is unavailable).
template <class Body>
void on_both_contexts(Body body) {
  SECTION("uring_context") {
    auto io = weft_io_test::make_uring_or_skip();
    if (!io) return;
    weft::sync_wait(*io, body(*io));
  }
  SECTION("io_pool") {
    auto io = weft_io_test::make_io_pool_or_skip(2);
    if (!io) return;
    weft::sync_wait(*io, body(*io));
  }
}

// ---- scripted streams -----------------------------------------------------------------------

// One read's outcome: bytes (at most what the reader asks for; the rest is the next
// read's), an error, or both.
struct chunk {
  std::string bytes;
  std::error_code ec;
};

// A stream whose reads complete at once with scripted chunks, then with error::eof:
// proves buffered_reader needs nothing but read_some. Counts its reads.
struct scripted_stream {
  std::deque<chunk> script;
  int reads = 0;

  struct read_op {
    scripted_stream* self;
    char* buf;
    std::size_t len;
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    io_result await_resume() const { return self->next(buf, len); }
  };
  read_op read_some(void* buf, std::size_t len) { return {this, static_cast<char*>(buf), len}; }

  io_result next(char* buf, std::size_t len) {
    ++reads;
    if (script.empty()) return {weft::io::error::eof, 0};
    chunk& c = script.front();
    const std::size_t n = std::min(len, c.bytes.size());
    std::memcpy(buf, c.bytes.data(), n);
    c.bytes.erase(0, n);
    const std::error_code ec = c.bytes.empty() ? c.ec : std::error_code{};
    if (c.bytes.empty()) script.pop_front();
    return {ec, n};
  }
};

// The same, but read_some is a coroutine (a weft::task), as a user's wrapper would be.
struct task_stream {
  scripted_stream inner;
  weft::task<io_result> read_some(void* buf, std::size_t len) { co_return co_await inner.read_some(buf, len); }
};

scripted_stream script(std::initializer_list<std::string> chunks) {
  scripted_stream s;
  for (const auto& c : chunks) s.script.push_back({c, {}});
  return s;
}

template <class Stream>
weft::task<line_result> line(buffered_reader<Stream>& in, std::string_view delim, std::size_t max = 0) {
  co_return co_await (max == 0 ? in.read_until(delim) : in.read_until(delim, max));
}

// Runs `t` to completion on a one-thread pool (the scripted reads complete inline).
template <class T>
T drive(weft::task<T> t) {
  static weft::thread_pool pool{{.threads = 1}};
  return weft::sync_wait(pool, std::move(t));
}

}  // namespace

// ---- over loopback TCP ---------------------------------------------------------------------

TEST_CASE("buffered_reader: lines written a byte at a time", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r);
    auto writer = weft::spawn(write_bytewise(io, w, "hello\nworld\r\nlast\n", true)).fork();
    std::vector<std::string> lines;
    for (int i = 0; i < 3; ++i) {
      auto [ec, l] = co_await in.read_until("\n");
      CHECK_FALSE(ec);
      lines.emplace_back(l);
    }
    auto [eec, rest] = co_await in.read_until("\n");
    co_await writer;
    CHECK(lines == std::vector<std::string>{"hello\n", "world\r\n", "last\n"});
    CHECK(eec == weft::io::error::eof);  // the stream ended between lines: nothing left
    CHECK(rest.empty());
    CHECK(in.buffered().empty());
  });
}

TEST_CASE("buffered_reader: several lines in one write stay buffered for the next calls", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r);
    const auto sent = co_await send_text(w, "a\nbb\nccc\ndddd");
    CHECK_FALSE(sent.ec);
    auto [e1, l1] = co_await in.read_until("\n");
    CHECK_FALSE(e1);
    CHECK(l1 == "a\n");
    auto [e2, l2] = co_await in.read_until("\n");
    CHECK(l2 == "bb\n");
    auto [e3, l3] = co_await in.read_until("\n");
    CHECK(l3 == "ccc\n");
    CHECK_FALSE((e2 || e3));
    // What follows the last line comes out of read_some, then the rest of the stream.
    char buf[16] = {};
    const auto more = co_await send_text(w, "eeee");
    CHECK_FALSE(more.ec);
    std::string rest;
    while (rest.size() < 8) {
      auto [ec, n] = co_await in.read_some(buf, sizeof buf);
      REQUIRE_FALSE(ec);
      rest.append(buf, n);
    }
    CHECK(rest == "ddddeeee");
  });
}

TEST_CASE("buffered_reader: a CRLF split across reads", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r);
    auto writer = weft::spawn([](weft::io::uring_context& ctx, tcp_stream& s) -> weft::task<void> {
                    (void)co_await send_text(s, "GET / HTTP/1.1\r");
                    co_await weft::io::sleep_for(ctx, 20ms);  // the reader has read "\r" alone by now
                    (void)co_await send_text(s, "\nHost: x\r");
                    co_await weft::io::sleep_for(ctx, 20ms);
                    (void)co_await send_text(s, "\n\r\n");
                  }(io, w))
                      .fork();
    auto [e1, l1] = co_await in.read_until("\r\n");
    CHECK(l1 == "GET / HTTP/1.1\r\n");
    auto [e2, l2] = co_await in.read_until("\r\n");
    CHECK(l2 == "Host: x\r\n");
    auto [e3, l3] = co_await in.read_until("\r\n");
    CHECK(l3 == "\r\n");
    CHECK_FALSE((e1 || e2 || e3));
    co_await writer;
  });
}

TEST_CASE("buffered_reader: a line exactly at the limit, one over it, and the end of the stream mid-line",
          "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r, 16);
    REQUIRE(in.capacity() == 16);
    // 16 bytes with the delimiter: the capacity, the default limit.
    const std::string at_limit = "0123456789abcde\n";
    (void)co_await send_text(w, at_limit + "1234567\n" + "123456789\n" + "complete\npartial");
    auto [e1, l1] = co_await in.read_until("\n");
    CHECK_FALSE(e1);
    CHECK(l1 == at_limit);
    auto [e2, l2] = co_await in.read_until("\n", 8);  // exactly 8
    CHECK_FALSE(e2);
    CHECK(l2 == "1234567\n");
    // 10 bytes, over a limit of 8: an error, the 8 bytes kept.
    auto [e3, l3] = co_await in.read_until("\n", 8);
    CHECK(e3 == weft::io::error::line_too_long);
    CHECK(e3 == std::errc::message_size);
    CHECK(l3 == "12345678");
    CHECK(in.buffered().substr(0, 8) == "12345678");
    in.consume(l3.size());  // skip them; the line's end is still there
    auto [e4, l4] = co_await in.read_until("\n", 8);
    CHECK_FALSE(e4);
    CHECK(l4 == "9\n");
    (void)w.shutdown(SHUT_WR);
    auto [e5, l5] = co_await in.read_until("\n");
    CHECK_FALSE(e5);
    CHECK(l5 == "complete\n");
    // The end mid-line: eof, the partial line in `line` and still buffered.
    auto [e6, l6] = co_await in.read_until("\n");
    CHECK(e6 == weft::io::error::eof);
    CHECK(l6 == "partial");
    CHECK(in.buffered() == "partial");
    char buf[32];
    auto [e7, n7] = co_await in.read_some(buf, sizeof buf);
    CHECK_FALSE(e7);
    CHECK(std::string(buf, n7) == "partial");
    auto [e8, n8] = co_await in.read_some(buf, sizeof buf);
    CHECK(e8 == weft::io::error::eof);
    CHECK(n8 == 0);
  });
}

TEST_CASE("buffered_reader: a line longer than the buffer is an error, never a bigger buffer",
          "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r, 16);
    const std::string long_line = std::string(40, 'x') + "\n";
    (void)co_await send_text(w, long_line);
    auto [ec, l] = co_await in.read_until("\n", 1000);  // a limit above the capacity is the capacity
    CHECK(ec == weft::io::error::line_too_long);
    CHECK(l == std::string(16, 'x'));
    // The rest of it through read_exact: 16 buffered, 25 more.
    std::string all(41, '\0');
    auto [xec, n] = co_await in.read_exact(all.data(), all.size());
    CHECK_FALSE(xec);
    CHECK(n == 41);
    CHECK(all == long_line);
  });
}

TEST_CASE("buffered_reader: read_exact across buffered and unbuffered bytes, and the end before it",
          "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r, 32);
    std::string body(300, '\0');
    for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
    (void)co_await send_text(w, "len 300\n" + body + "tail\n" + "short");
    auto [hec, header] = co_await in.read_until("\n");
    CHECK_FALSE(hec);
    CHECK(header == "len 300\n");
    const std::size_t ahead = in.buffered().size();  // part of the body, read with the header
    CHECK(ahead <= 24);
    std::string got(300, '\0');
    auto [bec, n] = co_await in.read_exact(got.data(), got.size());
    CHECK_FALSE(bec);
    CHECK(n == 300);
    CHECK(got == body);
    auto [tec, tail] = co_await in.read_until("\n");
    CHECK_FALSE(tec);
    CHECK(tail == "tail\n");
    (void)w.shutdown(SHUT_WR);
    char buf[16] = {};
    auto [eec, en] = co_await in.read_exact(buf, sizeof buf);  // 5 bytes, then the end
    CHECK(eec == weft::io::error::eof);
    CHECK(en == 5);
    CHECK(std::string(buf, en) == "short");
  });
}

TEST_CASE("buffered_reader: a stop ends the wait; the bytes read before it are not lost", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r);
    (void)co_await send_text(w, "par");
    const auto cut = co_await weft::with_timeout(in.read_until("\n"), 50ms);
    CHECK(cut.ec == std::errc::timed_out);
    if (cut.value) {  // the read ended, cancelled, before the deadline's report
      CHECK(cut.value->ec == std::errc::operation_canceled);
      CHECK(cut.value->line == "par");
    }
    CHECK(in.buffered() == "par");
    (void)co_await send_text(w, "tial\n");
    auto [ec, l] = co_await in.read_until("\n");
    CHECK_FALSE(ec);
    CHECK(l == "partial\n");
  });
}

TEST_CASE("buffered_reader: no byte lost or reordered, whatever the chunks and the calls", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    auto [w, r] = co_await connect_pair(io);
    buffered_reader in(r, 64);
    std::mt19937 rng(7);
    // Lines of 0 to 62 letters, each ended by "\r\n".
    std::string source;
    for (int i = 0; i < 2000; ++i) {
      source.append(std::uniform_int_distribution<std::size_t>(0, 62)(rng), static_cast<char>('a' + i % 26));
      source += "\r\n";
    }
    auto writer = weft::spawn([](tcp_stream& s, const std::string& text) -> weft::task<void> {
                    std::mt19937 chunks(11);
                    for (std::size_t at = 0; at < text.size();) {
                      const std::size_t n =
                          std::min(text.size() - at, std::uniform_int_distribution<std::size_t>(1, 200)(chunks));
                      if ((co_await s.write_all(text.data() + at, n)).ec) throw std::runtime_error("write failed");
                      at += n;
                    }
                    (void)s.shutdown(SHUT_WR);
                  }(w, source))
                      .fork();
    std::string got;
    char buf[100];
    for (int call = 0;; ++call) {
      const int kind = call % 3;
      if (kind == 0) {
        auto [ec, l] = co_await in.read_until("\r\n");
        got.append(l);
        if (ec) {
          REQUIRE(ec == weft::io::error::eof);
          in.consume(l.size());
          break;
        }
      } else if (kind == 1) {
        const std::size_t want = 1 + static_cast<std::size_t>(call) % sizeof buf;
        auto [ec, n] = co_await in.read_exact(buf, want);
        got.append(buf, n);
        if (ec) {
          REQUIRE(ec == weft::io::error::eof);
          break;
        }
      } else {
        auto [ec, n] = co_await in.read_some(buf, 1 + static_cast<std::size_t>(call) % 7);
        got.append(buf, n);
        if (ec) {
          REQUIRE(ec == weft::io::error::eof);
          break;
        }
      }
    }
    co_await writer;
    CHECK(got.size() == source.size());
    CHECK(got == source);
  });
}

TEST_CASE("buffered_reader over a unix_stream pair", "[io][buffered_reader]") {
  on_both_contexts([](weft::io::uring_context& io) -> weft::task<void> {
    weft::io::unix_stream w(io), r(io);
    REQUIRE_FALSE(weft::io::unix_stream::pair(w, r));
    buffered_reader in(r, 32);
    const std::string text = "first\nsecond\n" + std::string(50, 'z') + "\nlast";
    auto sent = co_await w.write_all(text.data(), text.size());
    CHECK_FALSE(sent.ec);
    w.close();
    auto [e1, l1] = co_await in.read_until("\n");
    const std::string first(l1);  // copied: the view lasts until the next call
    auto [e2, l2] = co_await in.read_until("\n");
    CHECK(first == "first\n");
    CHECK(l2 == "second\n");
    CHECK_FALSE((e1 || e2));
    auto [e3, l3] = co_await in.read_until("\n");
    CHECK(e3 == weft::io::error::line_too_long);
    CHECK(l3 == std::string(32, 'z'));
    in.consume(l3.size());
    auto [e4, l4] = co_await in.read_until("\n");
    CHECK_FALSE(e4);
    CHECK(l4 == std::string(18, 'z') + "\n");
    auto [e5, l5] = co_await in.read_until("\n");
    CHECK(e5 == weft::io::error::eof);
    CHECK(l5 == "last");
  });
}

// ---- over scripted streams: the reader is generic -------------------------------------------

TEST_CASE("buffered_reader over a scripted stream: exact reads, split delimiters, errors", "[io][buffered_reader]") {
  SECTION("one byte per read; the delimiter split across reads; one read per missing byte") {
    scripted_stream s = script({"a", "b", "\r", "\n", "c", "\r", "\n"});
    buffered_reader in(s, 8);
    const auto l1 = drive(line(in, "\r\n"));
    CHECK_FALSE(l1.ec);
    CHECK(l1.line == "ab\r\n");
    CHECK(s.reads == 4);
    CHECK(drive(line(in, "\r\n")).line == "c\r\n");
    CHECK(s.reads == 7);
    const auto end = drive(line(in, "\r\n"));
    CHECK(end.ec == weft::io::error::eof);
    CHECK(end.line.empty());
  }
  SECTION("several lines per read: one read serves them all, the rest stays buffered") {
    scripted_stream s = script({"x\ny\nz", "z\n"});
    buffered_reader in(s);
    CHECK(drive(line(in, "\n")).line == "x\n");
    CHECK(in.buffered() == "y\nz");
    CHECK(drive(line(in, "\n")).line == "y\n");
    CHECK(s.reads == 1);
    CHECK(drive(line(in, "\n")).line == "zz\n");
    CHECK(s.reads == 2);
  }
  SECTION("at the limit, over it, and skipping what was too long") {
    scripted_stream s = script({"abc\n", "abcd", "ef\nre"});
    buffered_reader in(s, 16);
    CHECK(drive(line(in, "\n", 4)).line == "abc\n");
    const auto too_long = drive(line(in, "\n", 4));
    CHECK(too_long.ec == weft::io::error::line_too_long);
    CHECK(too_long.line == "abcd");
    CHECK(s.reads == 2);  // "abcd" filled the limit: no read to look further
    in.consume(too_long.line.size());
    CHECK(drive(line(in, "\n", 4)).line == "ef\n");
    const auto partial = drive(line(in, "\n", 4));
    CHECK(partial.ec == weft::io::error::eof);
    CHECK(partial.line == "re");
  }
  SECTION("the stream's errors consume nothing; an error with bytes comes after them") {
    scripted_stream s;
    s.script.push_back({"half", std::make_error_code(std::errc::connection_reset)});
    buffered_reader in(s);
    const auto first = drive(line(in, "\n"));
    CHECK(first.ec == std::errc::connection_reset);  // the read had "half" and the reset
    CHECK(first.line == "half");
    CHECK(in.buffered() == "half");
    char buf[8];
    const auto r = drive(in.read_some(buf, sizeof buf));
    CHECK_FALSE(r.ec);
    CHECK(std::string(buf, r.n) == "half");
    s.script.push_back({"", std::make_error_code(std::errc::connection_reset)});
    CHECK(drive(in.read_some(buf, sizeof buf)).ec == std::errc::connection_reset);
    // read_exact: bytes with an error; the bytes are stored, the error reported with them.
    s.script.push_back({"12", std::make_error_code(std::errc::connection_aborted)});
    const auto x = drive(in.read_exact(buf, 4));
    CHECK(x.ec == std::errc::connection_aborted);
    CHECK(x.n == 2);
    CHECK(std::string(buf, 2) == "12");
  }
  SECTION("read_some serves what is buffered without reading, and reads straight into a large buffer") {
    scripted_stream s = script({"line\nmore", std::string(100, 'b')});
    buffered_reader in(s, 16);
    CHECK(drive(line(in, "\n")).line == "line\n");
    char small[2];
    const auto a = drive(in.read_some(small, sizeof small));
    CHECK(std::string(small, a.n) == "mo");
    CHECK(s.reads == 1);
    char big[64];
    const auto b = drive(in.read_some(big, sizeof big));
    CHECK(std::string(big, b.n) == "re");  // the buffered rest, no read
    CHECK(s.reads == 1);
    const auto c = drive(in.read_some(big, sizeof big));  // >= capacity: straight into `big`
    CHECK(c.n == 64);
    CHECK(in.buffered().empty());
    CHECK(drive(in.read_some(big, 0)).n == 0);
  }
  SECTION("bad arguments") {
    scripted_stream s = script({"a\n"});
    buffered_reader in(s, 4);
    CHECK(drive(line(in, "")).ec == std::errc::invalid_argument);
    CHECK(drive(in.read_until("abc", 2)).ec == std::errc::invalid_argument);
    CHECK(s.reads == 0);
    CHECK_THROWS_AS(buffered_reader<scripted_stream>(s, 0), std::invalid_argument);
  }
}

TEST_CASE("buffered_reader over a stream whose read_some is a task; random chunks lose nothing",
          "[io][buffered_reader]") {
  std::mt19937 rng(3);
  std::string source;
  for (int i = 0; i < 3000; ++i) {
    source.append(std::uniform_int_distribution<std::size_t>(0, 30)(rng), static_cast<char>('A' + i % 26));
    source += "\r\n";
  }
  task_stream s;
  for (std::size_t at = 0; at < source.size();) {
    const std::size_t n = std::min(source.size() - at, std::uniform_int_distribution<std::size_t>(1, 50)(rng));
    s.inner.script.push_back({source.substr(at, n), {}});
    at += n;
  }
  buffered_reader in(s, 40);
  std::string got;
  for (;;) {
    const auto [ec, l] = drive(line(in, "\r\n"));
    got.append(l);
    if (ec) {
      CHECK(ec == weft::io::error::eof);
      break;
    }
  }
  CHECK(got == source);
}
