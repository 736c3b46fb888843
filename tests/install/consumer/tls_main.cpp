// Uses the installed weft::tls: a certificate made with make_self_signed_certificate,
// a TLS handshake and one message over a Unix socketpair on a uring_context, where
// io_uring is available. Includes no Asio header.
#include <weft/io/tls.hpp>
#include <weft/io/unix.hpp>
#include <weft/io/uring_context.hpp>
#include <weft/scope.hpp>
#include <weft/sync_wait.hpp>
#include <weft/task.hpp>

#include <cstdio>
#include <string>

namespace {

weft::task<std::string> exchange(weft::io::tls_stream<weft::io::unix_stream>& server,
                                 weft::io::tls_stream<weft::io::unix_stream>& client) {
  weft::scope<std::error_code> sc;
  sc.spawn(server.handshake());
  if (auto ec = co_await client.handshake()) co_return "client handshake: " + ec.message();
  auto s = co_await sc.next();
  co_await sc.join();
  if (!s || *s) co_return "server handshake failed";
  if (auto [ec, n] = co_await client.write_all("hello", 5); ec) co_return "write: " + ec.message();
  char buf[8];
  auto [ec, n] = co_await server.read_some(buf, sizeof buf);
  if (ec) co_return "read: " + ec.message();
  co_return std::string(buf, n);
}

}  // namespace

int main() {
  try {
    weft::io::uring_context ring;
    const auto cert = weft::io::make_self_signed_certificate({"localhost"}, 1);
    auto sctx = weft::io::tls_context::server();
    auto cctx = weft::io::tls_context::client();
    if (sctx.use_certificate_chain(cert.chain_pem) || sctx.use_private_key(cert.key_pem) ||
        cctx.add_certificate_authority(cert.chain_pem)) {
      std::printf("weft tls consumer: bad certificate\n");
      return 1;
    }
    weft::io::unix_stream a(ring), b(ring);
    if (weft::io::unix_stream::pair(a, b)) return 1;
    weft::io::tls_stream server(std::move(a), sctx);
    weft::io::tls_stream client(std::move(b), cctx, "localhost");
    const std::string got = weft::sync_wait(ring, exchange(server, client));
    std::printf("weft tls consumer: %s\n", got.c_str());
    return got == "hello" ? 0 : 1;
  } catch (const weft::io::uring_unavailable& e) {
    std::printf("weft tls consumer: %s\n", e.what());
    return 0;
  }
}
