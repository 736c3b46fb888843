// io/src/tls.cpp: tls_context, tls_session and the weft.tls error category over OpenSSL 3
// (weft/io/tls.hpp). The only file of weft that includes OpenSSL.
#include "weft/io/tls.hpp"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace weft::io {

// ---- the weft.tls category --------------------------------------------------------------------
//
// Values: 1..5 the tls_errc conditions themselves; 6 a connection that ended during the
// handshake; 1000 + v a certificate refused for X509 verify result v; an OpenSSL error
// (ERR_PACK of library and reason, below 2^29 for the libraries that have numbers below
// 64) as is after the handshake, with bit 29 set during it.

namespace {

constexpr int k_ended_in_handshake = 6;
constexpr int k_verify_base = 1000;
constexpr int k_verify_end = 2000;
constexpr int k_handshake_bit = 1 << 29;

bool is_verify(int v) noexcept { return v >= k_verify_base && v < k_verify_end; }
bool is_packed(int v) noexcept { return v >= (1 << 23); }  // a library number is at least 1

class tls_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "weft.tls"; }
  std::string message(int v) const override {
    switch (v) {
      case 1:
        return "TLS handshake failed";
      case 2:
        return "TLS peer certificate verification failed";
      case 3:
        return "TLS protocol error";
      case 4:
        return "TLS stream truncated: the connection ended without close_notify";
      case 5:
        return "TLS connection not established";
      case k_ended_in_handshake:
        return "TLS handshake failed: the connection ended during it";
      default:
        break;
    }
    if (is_verify(v))
      return std::string("TLS certificate verification failed: ") + X509_verify_cert_error_string(v - k_verify_base);
    if (is_packed(v)) {
      const bool hs = (v & k_handshake_bit) != 0;
      const char* why = ERR_reason_error_string(static_cast<unsigned long>(v & ~k_handshake_bit));
      return std::string(hs ? "TLS handshake failed: " : "TLS error: ") + (why != nullptr ? why : "unknown reason");
    }
    return "unknown TLS error";
  }
  bool equivalent(int v, const std::error_condition& c) const noexcept override {
    if (c.category() == std::generic_category())
      return c.value() == static_cast<int>(std::errc::protocol_error) &&
             (v == 3 || (is_packed(v) && (v & k_handshake_bit) == 0));
    if (c.category() != *this) return false;
    switch (static_cast<tls_errc>(c.value())) {
      case tls_errc::handshake_failed:
        return v == 1 || v == 2 || v == k_ended_in_handshake || is_verify(v) ||
               (is_packed(v) && (v & k_handshake_bit) != 0);
      case tls_errc::verification_failed:
        return v == 2 || is_verify(v);
      case tls_errc::protocol_error:
        return v == 3 || (is_packed(v) && (v & k_handshake_bit) == 0);
      case tls_errc::truncated:
        return v == 4 || v == k_ended_in_handshake;
      case tls_errc::not_established:
        return v == 5;
    }
    return false;
  }
};

// The code of OpenSSL's last error in this thread's queue (then cleared), or `fallback`.
std::error_code openssl_error(bool handshaking, int fallback) {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return {fallback, tls_category()};
  if (ERR_SYSTEM_ERROR(e)) return {static_cast<int>(ERR_GET_REASON(e)), std::system_category()};
  const int lib = ERR_GET_LIB(e);
  if (lib <= 0 || lib >= 64) return {fallback, tls_category()};
  const int packed = static_cast<int>(ERR_PACK(lib, 0, ERR_GET_REASON(e)));
  return {handshaking ? (packed | k_handshake_bit) : packed, tls_category()};
}

std::error_code setup_error() { return openssl_error(false, 1); }

}  // namespace

const std::error_category& tls_category() noexcept {
  static const tls_category_impl c;
  return c;
}

// ---- tls_context ------------------------------------------------------------------------------

namespace detail {

struct sni_certificate {
  X509* leaf = nullptr;
  EVP_PKEY* key = nullptr;
  STACK_OF(X509) * chain = nullptr;
};

struct tls_context_state {
  SSL_CTX* ctx = nullptr;
  tls_role role = tls_role::client;
  bool resumption = true;
  std::vector<unsigned char> alpn;             // the wire form: length-prefixed names
  std::map<std::string, sni_certificate> sni;  // lower-case name -> certificate
  std::mutex sessions_lock;                    // a client's session cache
  std::map<std::string, SSL_SESSION*> sessions;

  ~tls_context_state() {
    for (auto& [name, c] : sni) {
      X509_free(c.leaf);
      EVP_PKEY_free(c.key);
      sk_X509_pop_free(c.chain, X509_free);
    }
    for (auto& [name, s] : sessions) SSL_SESSION_free(s);
    SSL_CTX_free(ctx);
  }
};

}  // namespace detail

namespace {

bool is_address(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

detail::tls_context_state* state_of(SSL* ssl) {
  return static_cast<detail::tls_context_state*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
}

// A client's new session (a ticket): a copy is kept as the one to resume for its server
// name.
int on_new_session(SSL* ssl, SSL_SESSION* s) {
  detail::tls_context_state* st = state_of(ssl);
  const auto* name = static_cast<const std::string*>(SSL_get_app_data(ssl));
  if (st == nullptr || name == nullptr || name->empty()) return 0;
  // A copy: `s` stays the current session of the connection that got it, which OpenSSL
  // goes on updating (a second ticket), so the connection that resumes from the cache
  // must get an object of its own.
  SSL_SESSION* copy = SSL_SESSION_dup(s);
  if (copy == nullptr) return 0;
  std::lock_guard lock(st->sessions_lock);
  SSL_SESSION*& slot = st->sessions[*name];
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = copy;
  return 0;  // `s` stays OpenSSL's
}

int on_server_name(SSL* ssl, int*, void* arg) {
  auto* st = static_cast<detail::tls_context_state*>(arg);
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return SSL_TLSEXT_ERR_OK;
  const auto it = st->sni.find(lower(name));
  if (it == st->sni.end()) return SSL_TLSEXT_ERR_OK;  // the default certificate
  if (SSL_use_certificate(ssl, it->second.leaf) != 1 || SSL_use_PrivateKey(ssl, it->second.key) != 1 ||
      SSL_set1_chain(ssl, it->second.chain) != 1)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  return SSL_TLSEXT_ERR_OK;
}

int on_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
            void* arg) {
  auto* st = static_cast<detail::tls_context_state*>(arg);
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, st->alpn.data(), static_cast<unsigned>(st->alpn.size()), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

std::shared_ptr<detail::tls_context_state> make_state(tls_role role) {
  auto st = std::make_shared<detail::tls_context_state>();
  st->role = role;
  st->ctx = SSL_CTX_new(role == tls_role::client ? TLS_client_method() : TLS_server_method());
  if (st->ctx == nullptr) throw std::system_error(setup_error(), "weft::io::tls_context");
  SSL_CTX_set_app_data(st->ctx, st.get());
  SSL_CTX_set_min_proto_version(st->ctx, TLS1_2_VERSION);
  // No renegotiation (TLS 1.2's; 1.3 has none), buffers released while a connection idles.
  SSL_CTX_set_options(st->ctx, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(st->ctx, SSL_MODE_RELEASE_BUFFERS);
  if (role == tls_role::client) {
    SSL_CTX_set_verify(st->ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_default_verify_paths(st->ctx);
    SSL_CTX_set_session_cache_mode(st->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(st->ctx, &on_new_session);
  } else {
    SSL_CTX_set_verify(st->ctx, SSL_VERIFY_NONE, nullptr);
    SSL_CTX_set_tlsext_servername_callback(st->ctx, &on_server_name);
    SSL_CTX_set_tlsext_servername_arg(st->ctx, st.get());
  }
  ERR_clear_error();
  return st;
}

// PEM text as a read-only memory BIO (freed by the caller).
BIO* pem_bio(std::string_view pem) { return BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())); }

// Reads a chain: the leaf, then every further certificate. Null leaf: the error.
std::error_code read_chain(std::string_view pem, X509*& leaf, STACK_OF(X509) * &rest) {
  BIO* b = pem_bio(pem);
  if (b == nullptr) return std::make_error_code(std::errc::not_enough_memory);
  leaf = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
  if (leaf == nullptr) {
    BIO_free(b);
    return setup_error();
  }
  rest = sk_X509_new_null();
  while (X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr)) sk_X509_push(rest, x);
  ERR_clear_error();  // the end of the text reads as a "no start line" error
  BIO_free(b);
  return {};
}

std::error_code read_key(std::string_view pem, EVP_PKEY*& key) {
  BIO* b = pem_bio(pem);
  if (b == nullptr) return std::make_error_code(std::errc::not_enough_memory);
  key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  if (key == nullptr) return setup_error();
  return {};
}

std::error_code file_error(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) {
    ERR_clear_error();
    return {errno, std::system_category()};
  }
  return setup_error();
}

}  // namespace

tls_context tls_context::client() { return tls_context(make_state(tls_role::client)); }
tls_context tls_context::server() { return tls_context(make_state(tls_role::server)); }

std::error_code tls_context::use_certificate_chain_file(const std::string& path) {
  if (SSL_CTX_use_certificate_chain_file(m_state->ctx, path.c_str()) != 1) return file_error(path);
  return {};
}

std::error_code tls_context::use_certificate_chain(std::string_view pem) {
  X509* leaf = nullptr;
  STACK_OF(X509)* rest = nullptr;
  if (auto ec = read_chain(pem, leaf, rest)) return ec;
  std::error_code ec;
  if (SSL_CTX_use_certificate(m_state->ctx, leaf) != 1 || SSL_CTX_set1_chain(m_state->ctx, rest) != 1)
    ec = setup_error();
  X509_free(leaf);
  sk_X509_pop_free(rest, X509_free);
  return ec;
}

std::error_code tls_context::use_private_key_file(const std::string& path) {
  if (SSL_CTX_use_PrivateKey_file(m_state->ctx, path.c_str(), SSL_FILETYPE_PEM) != 1) return file_error(path);
  return {};
}

std::error_code tls_context::use_private_key(std::string_view pem) {
  EVP_PKEY* key = nullptr;
  if (auto ec = read_key(pem, key)) return ec;
  std::error_code ec;
  if (SSL_CTX_use_PrivateKey(m_state->ctx, key) != 1) ec = setup_error();
  EVP_PKEY_free(key);
  return ec;
}

std::error_code tls_context::load_verify_file(const std::string& path) {
  if (SSL_CTX_load_verify_locations(m_state->ctx, path.c_str(), nullptr) != 1) return file_error(path);
  return {};
}

std::error_code tls_context::add_certificate_authority(std::string_view pem) {
  X509* leaf = nullptr;
  STACK_OF(X509)* rest = nullptr;
  if (auto ec = read_chain(pem, leaf, rest)) return ec;
  X509_STORE* store = SSL_CTX_get_cert_store(m_state->ctx);
  std::error_code ec;
  if (X509_STORE_add_cert(store, leaf) != 1) ec = setup_error();
  for (int i = 0; !ec && i < sk_X509_num(rest); ++i)
    if (X509_STORE_add_cert(store, sk_X509_value(rest, i)) != 1) ec = setup_error();
  X509_free(leaf);
  sk_X509_pop_free(rest, X509_free);
  return ec;
}

std::error_code tls_context::use_default_verify_paths() {
  if (SSL_CTX_set_default_verify_paths(m_state->ctx) != 1) return setup_error();
  return {};
}

void tls_context::set_verify_peer(bool on) {
  int mode = SSL_VERIFY_NONE;
  if (on)
    mode = m_state->role == tls_role::client ? SSL_VERIFY_PEER : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(m_state->ctx, mode, nullptr);
}

std::error_code tls_context::set_min_version(tls_version v) {
  if (SSL_CTX_set_min_proto_version(m_state->ctx, v == tls_version::tls1_3 ? TLS1_3_VERSION : TLS1_2_VERSION) != 1)
    return setup_error();
  return {};
}

std::error_code tls_context::set_alpn(const std::vector<std::string>& protocols) {
  std::vector<unsigned char> wire;
  for (const std::string& p : protocols) {
    if (p.empty() || p.size() > 255) return std::make_error_code(std::errc::invalid_argument);
    wire.push_back(static_cast<unsigned char>(p.size()));
    wire.insert(wire.end(), p.begin(), p.end());
  }
  if (m_state->role == tls_role::client) {
    if (SSL_CTX_set_alpn_protos(m_state->ctx, wire.data(), static_cast<unsigned>(wire.size())) != 0)
      return setup_error();  // 0 is success here
  } else {
    SSL_CTX_set_alpn_select_cb(m_state->ctx, &on_alpn, m_state.get());
  }
  m_state->alpn = std::move(wire);
  return {};
}

std::error_code tls_context::add_server_name(const std::string& name, std::string_view chain_pem,
                                             std::string_view key_pem) {
  if (name.empty() || m_state->role != tls_role::server) return std::make_error_code(std::errc::invalid_argument);
  detail::sni_certificate c;
  if (auto ec = read_chain(chain_pem, c.leaf, c.chain)) return ec;
  if (auto ec = read_key(key_pem, c.key)) {
    X509_free(c.leaf);
    sk_X509_pop_free(c.chain, X509_free);
    return ec;
  }
  if (X509_check_private_key(c.leaf, c.key) != 1) {
    const std::error_code ec = setup_error();
    X509_free(c.leaf);
    EVP_PKEY_free(c.key);
    sk_X509_pop_free(c.chain, X509_free);
    return ec;
  }
  auto [it, fresh] = m_state->sni.try_emplace(lower(name));
  if (!fresh) {
    X509_free(it->second.leaf);
    EVP_PKEY_free(it->second.key);
    sk_X509_pop_free(it->second.chain, X509_free);
  }
  it->second = c;
  return {};
}

void tls_context::set_session_resumption(bool on) {
  m_state->resumption = on;
  if (m_state->role == tls_role::server) {
    if (on) {
      SSL_CTX_clear_options(m_state->ctx, SSL_OP_NO_TICKET);
      SSL_CTX_set_num_tickets(m_state->ctx, 2);
      SSL_CTX_set_session_cache_mode(m_state->ctx, SSL_SESS_CACHE_SERVER);
    } else {
      SSL_CTX_set_options(m_state->ctx, SSL_OP_NO_TICKET);
      SSL_CTX_set_num_tickets(m_state->ctx, 0);
      SSL_CTX_set_session_cache_mode(m_state->ctx, SSL_SESS_CACHE_OFF);
    }
  }
}

tls_role tls_context::role() const noexcept { return m_state->role; }
void* tls_context::native_handle() const noexcept { return m_state->ctx; }

// ---- tls_session ------------------------------------------------------------------------------

namespace detail {

namespace {
SSL* ssl_of(void* p) { return static_cast<SSL*>(p); }
BIO* bio_of(void* p) { return static_cast<BIO*>(p); }
}  // namespace

tls_session::tls_session(const tls_context& ctx, std::string_view server_name)
    : m_context(ctx.m_state), m_name(server_name) {
  tls_context_state& st = *ctx.m_state;
  SSL* ssl = SSL_new(st.ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl == nullptr || in == nullptr || out == nullptr) {
    SSL_free(ssl);
    BIO_free(in);
    BIO_free(out);
    throw std::system_error(setup_error(), "weft::io::tls_stream");
  }
  BIO_set_mem_eof_return(in, -1);  // no bytes yet means "wait for more", never the end
  SSL_set_bio(ssl, in, out);       // the SSL owns both now
  m_ssl = ssl;
  m_in = in;
  m_out = out;
  SSL_set_app_data(ssl, &m_name);
  if (st.role == tls_role::client) {
    SSL_set_connect_state(ssl);
    if (!m_name.empty()) {
      if (is_address(m_name)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), m_name.c_str());
      } else {
        SSL_set_tlsext_host_name(ssl, m_name.c_str());
        SSL_set1_host(ssl, m_name.c_str());
      }
      if (st.resumption) {
        // Taken out of the cache: one session (a TLS 1.3 ticket) serves one connection,
        // as RFC 8446 advises, and two connections never share one SSL_SESSION while
        // OpenSSL updates it; the connection's own new tickets refill the cache.
        std::lock_guard lock(st.sessions_lock);
        if (auto it = st.sessions.find(m_name); it != st.sessions.end()) {
          SSL_set_session(ssl, it->second);
          SSL_SESSION_free(it->second);
          st.sessions.erase(it);
        }
      }
    }
  } else {
    SSL_set_accept_state(ssl);
  }
  ERR_clear_error();
}

tls_session::~tls_session() { SSL_free(ssl_of(m_ssl)); }

tls_session::step tls_session::finish(int r, bool handshaking) {
  const int e = SSL_get_error(ssl_of(m_ssl), r);
  switch (e) {
    case SSL_ERROR_NONE:
      return step::done;
    case SSL_ERROR_WANT_READ:
      ERR_clear_error();
      return step::want_read;
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      return step::closed;
    default:
      break;
  }
  const long verify = SSL_get_verify_result(ssl_of(m_ssl));
  if (handshaking && verify != X509_V_OK) {
    ERR_clear_error();
    m_error = {k_verify_base + static_cast<int>(verify), tls_category()};
  } else {
    m_error = openssl_error(handshaking, handshaking ? 1 : 3);
  }
  m_established = false;
  return step::failed;
}

tls_session::step tls_session::handshake() {
  std::lock_guard lock(m_lock);
  if (m_error) return step::failed;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_of(m_ssl));
  if (r == 1) {
    m_established = true;
    return step::done;
  }
  return finish(r, true);
}

tls_session::step tls_session::read(void* buf, std::size_t len, std::size_t& n) {
  std::lock_guard lock(m_lock);
  if (m_error) return step::failed;
  ERR_clear_error();
  const int r = SSL_read_ex(ssl_of(m_ssl), buf, len, &n);
  if (r == 1) return step::done;
  return finish(r, false);
}

tls_session::step tls_session::write(const void* buf, std::size_t len, std::size_t& n) {
  std::lock_guard lock(m_lock);
  n = 0;
  if (m_error) return step::failed;
  if (len == 0) return step::done;
  ERR_clear_error();
  const int r = SSL_write_ex(ssl_of(m_ssl), buf, len, &n);
  if (r == 1) return step::done;
  return finish(r, false);
}

tls_session::step tls_session::shutdown() {
  std::lock_guard lock(m_lock);
  if (m_error) return step::failed;
  ERR_clear_error();
  const int r = SSL_shutdown(ssl_of(m_ssl));
  if (r == 1) return step::done;
  if (r == 0) return step::want_read;  // ours is sent; the peer's is to come
  return finish(r, false);
}

void tls_session::feed(const char* data, std::size_t n) {
  std::lock_guard lock(m_lock);
  BIO_write(bio_of(m_in), data, static_cast<int>(n));  // a memory BIO takes it all (or runs out of memory)
}

std::size_t tls_session::drain(char* out, std::size_t cap) {
  std::lock_guard lock(m_lock);
  const int n = BIO_read(bio_of(m_out), out, static_cast<int>(cap));
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

std::error_code tls_session::error() const {
  std::lock_guard lock(m_lock);
  return m_error ? m_error : make_error_code(tls_errc::not_established);
}

std::string tls_session::alpn() const {
  std::lock_guard lock(m_lock);
  const unsigned char* p = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(ssl_of(m_ssl), &p, &len);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), len) : std::string();
}

std::string tls_session::peer_subject() const {
  std::lock_guard lock(m_lock);
  X509* peer = SSL_get1_peer_certificate(ssl_of(m_ssl));
  if (peer == nullptr) return {};
  std::string out;
  if (BIO* b = BIO_new(BIO_s_mem())) {
    X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    if (n > 0) out.assign(data, static_cast<std::size_t>(n));
    BIO_free(b);
  }
  X509_free(peer);
  return out;
}

bool tls_session::established() const {
  std::lock_guard lock(m_lock);
  return m_established && !m_error;
}

std::size_t tls_session::pending_output() const {
  std::lock_guard lock(m_lock);
  return BIO_ctrl_pending(bio_of(m_out));
}

bool tls_session::resumed() const {
  std::lock_guard lock(m_lock);
  return SSL_session_reused(ssl_of(m_ssl)) == 1;
}

void tls_session::mark_truncated() {
  std::lock_guard lock(m_lock);
  if (m_error) return;
  m_error = {m_established ? static_cast<int>(tls_errc::truncated) : k_ended_in_handshake, tls_category()};
  m_established = false;
}

}  // namespace detail

// ---- make_self_signed_certificate -------------------------------------------------------------

namespace {

[[noreturn]] void fail(const char* what) { throw std::system_error(setup_error(), what); }

std::string pem_of(int (*write)(BIO*, void*), void* what) {
  BIO* b = BIO_new(BIO_s_mem());
  if (b == nullptr || write(b, what) != 1) {
    BIO_free(b);
    fail("weft::io::make_self_signed_certificate: PEM");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return out;
}

int write_x509(BIO* b, void* x) { return PEM_write_bio_X509(b, static_cast<X509*>(x)); }
int write_key(BIO* b, void* k) {
  return PEM_write_bio_PrivateKey(b, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0, nullptr, nullptr);
}

}  // namespace

tls_certificate make_self_signed_certificate(const std::vector<std::string>& names, int days,
                                             const tls_certificate* issuer) {
  if (names.empty()) throw std::invalid_argument("weft::io::make_self_signed_certificate: no names");
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509* issuer_x = nullptr;
  EVP_PKEY* issuer_key = nullptr;
  const auto cleanup = [&] {
    EVP_PKEY_free(key);
    X509_free(x);
    X509_free(issuer_x);
    EVP_PKEY_free(issuer_key);
  };
  try {
    if (key == nullptr || x == nullptr) fail("weft::io::make_self_signed_certificate: key");
    if (issuer != nullptr) {
      STACK_OF(X509)* rest = nullptr;
      if (read_chain(issuer->chain_pem, issuer_x, rest) || read_key(issuer->key_pem, issuer_key))
        fail("weft::io::make_self_signed_certificate: issuer");
      sk_X509_pop_free(rest, X509_free);
    }
    X509_set_version(x, 2);
    unsigned char serial[16];
    RAND_bytes(serial, sizeof serial);
    serial[0] &= 0x7f;
    BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    const long day = 24L * 60 * 60;
    X509_gmtime_adj(X509_getm_notBefore(x), days < 0 ? (days - 1) * day : -60);
    X509_gmtime_adj(X509_getm_notAfter(x), days * day);
    X509_set_pubkey(x, key);
    X509_NAME* subject = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(names[0].c_str()),
                               -1, -1, 0);
    X509_set_issuer_name(x, issuer_x != nullptr ? X509_get_subject_name(issuer_x) : subject);
    std::string san;
    for (const std::string& n : names)
      san += (san.empty() ? "" : ",") + std::string(is_address(n) ? "IP:" : "DNS:") + n;
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer_x != nullptr ? issuer_x : x, x, nullptr, nullptr, 0);
    const std::pair<int, std::string> exts[] = {{NID_subject_alt_name, san},
                                                {NID_basic_constraints, issuer_x != nullptr ? "CA:FALSE" : "CA:TRUE"}};
    for (const auto& [nid, value] : exts) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
      if (ext == nullptr || X509_add_ext(x, ext, -1) != 1) {
        X509_EXTENSION_free(ext);
        fail("weft::io::make_self_signed_certificate: extension");
      }
      X509_EXTENSION_free(ext);
    }
    if (X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0)
      fail("weft::io::make_self_signed_certificate: sign");
    tls_certificate out{pem_of(&write_x509, x), pem_of(&write_key, key)};
    cleanup();
    return out;
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace weft::io
