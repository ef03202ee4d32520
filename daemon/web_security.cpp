#include "web_security.hpp"

#include <crypt.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include <boost/asio/post.hpp>

namespace nodewatch {
namespace {

std::string openssl_error(const std::string& what) {
  std::string out = what;
  unsigned long e = 0;
  bool first = true;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += first ? ": " : "; ";
    out += buf;
    first = false;
  }
  return out;
}

// OpenSSL's name of each IANA suite name it knows (all it has compiled in).
std::map<std::string, std::string> openssl_suite_names() {
  std::map<std::string, std::string> out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return out;
  SSL_CTX_set_security_level(ctx, 0);
  SSL_CTX_set_cipher_list(ctx, "ALL:COMPLEMENTOFALL:@SECLEVEL=0");
  STACK_OF(SSL_CIPHER)* list = SSL_CTX_get_ciphers(ctx);
  for (int i = 0; list != nullptr && i < sk_SSL_CIPHER_num(list); ++i) {
    const SSL_CIPHER* c = sk_SSL_CIPHER_value(list, i);
    const char* std_name = SSL_CIPHER_standard_name(c);
    if (std_name != nullptr) out[std_name] = SSL_CIPHER_get_name(c);
  }
  SSL_CTX_free(ctx);
  return out;
}

// The SANs of a certificate, as strings (DNS, IP, e-mail, URI).
std::vector<std::string> sans_of(X509* cert) {
  std::vector<std::string> out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    auto str = [&](const ASN1_STRING* s) {
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                       static_cast<std::size_t>(ASN1_STRING_length(s)));
    };
    switch (n->type) {
      case GEN_DNS: str(n->d.dNSName); break;
      case GEN_EMAIL: str(n->d.rfc822Name); break;
      case GEN_URI: str(n->d.uniformResourceIdentifier); break;
      case GEN_IPADD: {
        const ASN1_OCTET_STRING* ip = n->d.iPAddress;
        const unsigned char* p = ASN1_STRING_get0_data(ip);
        if (ASN1_STRING_length(ip) == 4) {
          asio::ip::address_v4::bytes_type b;
          std::copy(p, p + 4, b.begin());
          out.push_back(asio::ip::address_v4(b).to_string());
        } else if (ASN1_STRING_length(ip) == 16) {
          asio::ip::address_v6::bytes_type b;
          std::copy(p, p + 16, b.begin());
          out.push_back(asio::ip::address_v6(b).to_string());
        }
        break;
      }
      default: break;
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

std::string base64_decode(std::string_view in, bool* ok) {
  *ok = false;
  if (in.size() % 4 != 0 || in.size() > 8192) return {};
  std::string out(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) return {};
  std::size_t len = static_cast<std::size_t>(n);
  if (!in.empty() && in.back() == '=') --len;
  if (in.size() >= 2 && in[in.size() - 2] == '=') --len;
  out.resize(len);
  *ok = true;
  return out;
}

std::string sha256_hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

constexpr std::size_t kCacheMax = 128;
// Addresses whose standing is kept (a flood from more forgets the oldest).
constexpr std::size_t kStandingsMax = 4096;
// A failure's weight halves in this time.
constexpr std::chrono::duration<double> kFailureHalfLife = std::chrono::minutes(1);
// An address that has logged in goes first while its failures since stay
// below this.
constexpr double kTrustedFailuresMax = 3;

}  // namespace

WebSecurity::FileId WebSecurity::identify(const std::string& path) {
  FileId id;
  id.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.inode = st.st_ino;
    id.size = static_cast<std::uint64_t>(st.st_size);
    id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  return id;
}

bool WebSecurity::changed_on_disk(helper::Fs* fs, bool* unanswered) const {
  for (const FileId& f : files_) {
    helper::StatInfo info;
    helper::Answer a;
    if (fs != nullptr)
      a = fs->stat(f.path, helper::Deadline{helper::Clock::now() + std::chrono::seconds(1)}, &info);
    if (fs == nullptr || a.failure == helper::Failure::kUnavailable) {
      if (identify(f.path) != f) return true;
      continue;
    }
    if (!a.answered()) {
      if (unanswered != nullptr) *unanswered = true;
      return false;
    }
    // The helper's answer has no inode, and its time is a double (to a
    // microsecond, here): a rewrite changes the size or the time.
    const bool exists = a.err == 0;
    if (exists != f.exists) return true;
    if (exists && (info.size != f.size ||
                   std::abs(info.mtime_seconds - static_cast<double>(f.mtime_ns) / 1e9) > 1e-6))
      return true;
  }
  return false;
}

WebSecurity::Built WebSecurity::build(const std::string& path) {
  Built out;
  auto sec = std::make_shared<WebSecurity>();
  sec->path_ = path;
  if (path.empty()) {
    out.security = std::move(sec);
    return out;
  }
  sec->files_.push_back(identify(path));
  WebConfigResult parsed = load_web_config(path);
  for (const ConfigError& e : parsed.errors) out.errors.push_back(e.str());
  if (!parsed.config) return out;
  sec->config_ = std::move(*parsed.config);
  if (sec->config_.tls) {
    const TlsServerConfig& t = *sec->config_.tls;
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    SSL_CTX* c = ctx->native_handle();
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_min_proto_version(c, t.min_version);
    SSL_CTX_set_max_proto_version(c, t.max_version);
    if (t.min_version < 0x0303)
      SSL_CTX_set_security_level(c, 0);  // TLS 1.0/1.1 need it in OpenSSL 3
    boost::system::error_code ec;
    auto fail = [&](const std::string& what) {
      out.errors.push_back(path + ": " + openssl_error(what));
    };
    if (!t.cert_file.empty()) {
      sec->files_.push_back(identify(t.cert_file));
      ctx->use_certificate_chain_file(t.cert_file, ec);
      if (ec) fail("tls_server_config.cert_file " + t.cert_file + " cannot be loaded");
    } else {
      ctx->use_certificate_chain(asio::buffer(t.cert), ec);
      if (ec) fail("tls_server_config.cert cannot be loaded");
    }
    if (!t.key_file.empty()) {
      sec->files_.push_back(identify(t.key_file));
      ctx->use_private_key_file(t.key_file, asio::ssl::context::pem, ec);
      if (ec) fail("tls_server_config.key_file " + t.key_file + " cannot be loaded");
    } else {
      ctx->use_private_key(asio::buffer(t.key), asio::ssl::context::pem, ec);
      if (ec) fail("tls_server_config.key cannot be loaded");
    }
    if (out.errors.empty() && SSL_CTX_check_private_key(c) != 1)
      fail("tls_server_config: the key does not match the certificate");
    if (!t.cipher_suites.empty()) {
      static const std::map<std::string, std::string> kNames = openssl_suite_names();
      std::string list;
      for (const std::string& s : t.cipher_suites) {
        auto it = kNames.find(s);
        if (it == kNames.end()) {
          out.errors.push_back(path + ": tls_server_config.cipher_suites: " + s +
                               " is not in this OpenSSL");
          continue;
        }
        if (!list.empty()) list += ':';
        list += it->second;
      }
      if (!list.empty() && SSL_CTX_set_cipher_list(c, list.c_str()) != 1)
        fail("tls_server_config.cipher_suites cannot be used");
    }
    if (!t.curve_preferences.empty()) {
      std::string groups;
      for (const std::string& g : t.curve_preferences) groups += (groups.empty() ? "" : ":") + g;
      if (SSL_CTX_set1_groups_list(c, groups.c_str()) != 1)
        fail("tls_server_config.curve_preferences cannot be used");
    }
    const bool verify = t.client_auth == ClientAuth::kVerifyIfGiven ||
                        t.client_auth == ClientAuth::kRequireAndVerify;
    if (t.client_auth != ClientAuth::kNone) {
      if (!t.client_ca_file.empty()) {
        sec->files_.push_back(identify(t.client_ca_file));
        ctx->load_verify_file(t.client_ca_file, ec);
        if (ec) fail("tls_server_config.client_ca_file " + t.client_ca_file + " cannot be loaded");
        STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(t.client_ca_file.c_str());
        if (names != nullptr) SSL_CTX_set_client_CA_list(c, names);
      } else if (!t.client_ca.empty()) {
        ctx->add_certificate_authority(asio::buffer(t.client_ca), ec);
        if (ec) fail("tls_server_config.client_ca cannot be loaded");
      } else {
        ctx->set_default_verify_paths(ec);
      }
      int mode = SSL_VERIFY_PEER;
      if (t.client_auth == ClientAuth::kRequireAny ||
          t.client_auth == ClientAuth::kRequireAndVerify)
        mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      ctx->set_verify_mode(mode);
      std::vector<std::string> sans = t.client_allowed_sans;
      ctx->set_verify_callback([verify, sans](bool preverified, asio::ssl::verify_context& vc) {
        X509_STORE_CTX* store = vc.native_handle();
        // Request/RequireAny: a certificate is taken without verifying its
        // chain; its SANs are still matched, as the toolkit does.
        if (verify && !preverified) return false;
        if (X509_STORE_CTX_get_error_depth(store) != 0 || sans.empty()) return true;
        X509* leaf = X509_STORE_CTX_get_current_cert(store);
        for (const std::string& s : sans_of(leaf))
          if (std::find(sans.begin(), sans.end(), s) != sans.end()) return true;
        X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
        return false;
      });
    }
    if (!out.errors.empty()) return out;
    sec->tls_ = std::move(ctx);
  }
  out.security = std::move(sec);
  return out;
}

std::string WebSecurity::summary() const {
  std::string s;
  if (!tls_) {
    s = "TLS off";
  } else {
    const TlsServerConfig& t = *config_.tls;
    auto v = [](TlsVersion x) { return "1." + std::to_string(x - 0x0301); };
    static constexpr const char* kAuth[] = {"not asked for", "asked for, not verified",
                                            "required, not verified", "verified if given",
                                            "required and verified"};
    s = "TLS " + v(t.min_version) + "-" + v(t.max_version) + ", client certificates " +
        kAuth[static_cast<int>(t.client_auth)];
    if (!t.client_allowed_sans.empty())
      s += " (" + std::to_string(t.client_allowed_sans.size()) + " allowed SANs)";
  }
  s += authenticates() ? "; basic authentication (" +
                             std::to_string(config_.basic_auth_users.size()) + " users)"
                       : "; no authentication";
  if (config_.rate_interval.count() > 0) s += "; rate limited";
  return s;
}

// --- Authenticator ------------------------------------------------------------

std::optional<std::pair<std::string, std::string>> parse_basic_authorization(std::string_view v) {
  std::size_t sp = v.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  std::string scheme(v.substr(0, sp));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "basic") return std::nullopt;
  std::string_view b64 = v.substr(sp + 1);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  while (!b64.empty() && b64.back() == ' ') b64.remove_suffix(1);
  bool ok = false;
  std::string decoded = base64_decode(b64, &ok);
  if (!ok) return std::nullopt;
  std::size_t colon = decoded.find(':');
  if (colon == std::string::npos) return std::nullopt;
  // RFC 7617 §2: neither part holds a control character. A NUL would also
  // end the password early where bcrypt reads it as a C string
  // ("goodpass\0junk" passing for "goodpass").
  if (std::any_of(decoded.begin(), decoded.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    return std::nullopt;
  return std::make_pair(decoded.substr(0, colon), decoded.substr(colon + 1));
}

Authenticator::Authenticator() {
  thread_ = std::thread([this] { run(); });
}

// A bcrypt hash for unknown users, of the cost the known users' hashes
// have (their first one's): made on the checking thread when first needed.
std::string Authenticator::dummy_hash(const WebSecurity& security) {
  int cost = 10;
  const auto& users = security.config().basic_auth_users;
  if (!users.empty()) {
    const std::string& h = users.begin()->second;
    cost = (h[4] - '0') * 10 + (h[5] - '0');
  }
  auto it = dummies_.find(cost);
  if (it != dummies_.end()) return it->second;
  std::string out;
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, salt, sizeof salt) !=
      nullptr) {
    crypt_data data{};
    if (const char* h = crypt_rn("nodewatch: no such user", salt, &data, sizeof data);
        h != nullptr && h[0] != '*')
      out = h;
  }
  dummies_[cost] = out;
  return out;
}

Authenticator::~Authenticator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::size_t Authenticator::cached() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

std::size_t Authenticator::hashed() const {
  std::lock_guard lock(mu_);
  return hashed_;
}

void Authenticator::hold(bool held) {
  {
    std::lock_guard lock(mu_);
    held_ = held;
  }
  cv_.notify_all();
}

bool Authenticator::verify(const std::string& password, const std::string& hash) {
  crypt_data data{};
  const char* out = crypt_rn(password.c_str(), hash.c_str(), &data, sizeof data);
  if (out == nullptr || out[0] == '*') return false;
  const std::size_t n = std::strlen(out);
  if (n != hash.size()) return false;
  return CRYPTO_memcmp(out, hash.data(), n) == 0;
}

std::string client_key(const asio::ip::address& a) {
  if (a.is_v6() && !a.to_v6().is_v4_mapped()) {
    asio::ip::address_v6::bytes_type b = a.to_v6().to_bytes();
    std::fill(b.begin() + 8, b.end(), 0);
    return asio::ip::address_v6(b).to_string() + "/64";
  }
  return a.is_v6() ? asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string()
                   : a.to_string();
}

Authenticator::Standing& Authenticator::standing(const std::string& client,
                                                 Clock::time_point now) const {
  if (standings_.size() >= kStandingsMax && standings_.count(client) == 0) {
    // The address heard from longest ago makes room.
    auto oldest =
        std::min_element(standings_.begin(), standings_.end(),
                         [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    standings_.erase(oldest);
  }
  Standing& s = standings_[client];
  if (s.at != Clock::time_point{} && now > s.at)
    s.failures *= std::exp2(-std::chrono::duration<double>(now - s.at) / kFailureHalfLife);
  s.at = now;
  return s;
}

double Authenticator::failures(const asio::ip::address& client) const {
  std::lock_guard lock(mu_);
  return standing(client_key(client), Clock::now()).failures;
}

std::shared_ptr<Authenticator::Pending> Authenticator::check(
    std::shared_ptr<const WebSecurity> security, std::string_view authorization,
    const asio::ip::address& client, asio::any_io_executor executor,
    std::function<void(Verdict)> done) {
  auto creds = parse_basic_authorization(authorization);
  if (!creds) {  // no credentials or not Basic: no bcrypt to run
    done(Verdict::kDenied);
    return nullptr;
  }
  const auto& users = security->config().basic_auth_users;
  auto it = users.find(creds->first);
  const std::string hash = it != users.end() ? it->second : std::string();
  std::string key = creds->first + '\n' + hash + '\n' + sha256_hex(creds->second);
  auto pending = std::make_shared<Pending>();
  {
    std::lock_guard lock(mu_);
    if (it != users.end() && cache_.count(key) != 0) {
      done(Verdict::kAllowed);
      return nullptr;
    }
    Job j;
    j.security = std::move(security);
    j.user = std::move(creds->first);
    j.password = std::move(creds->second);
    j.key = std::move(key);
    j.client = client_key(client);
    j.executor = std::move(executor);
    j.done = std::move(done);
    j.pending = pending;
    j.seq = seq_++;
    queue_.push_back(std::move(j));
  }
  cv_.notify_one();
  return pending;
}

std::vector<Authenticator::Job>::iterator Authenticator::next_job(Clock::time_point now) {
  // Withdrawn jobs are answered (their callbacks must end on their own
  // executor, where the connection lives) and dropped without bcrypt.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->pending->queued()) {
      ++it;
      continue;
    }
    asio::post(it->executor, [done = std::move(it->done)] { done(Verdict::kDenied); });
    it = queue_.erase(it);
  }
  auto rank = [&](const Job& j) {
    const Standing& s = standing(j.client, now);
    const bool trusted = s.succeeded && s.failures < kTrustedFailuresMax;
    return std::make_tuple(trusted ? 0 : 1, s.failures, j.seq);
  };
  auto best = queue_.end();
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if (best == queue_.end() || rank(*it) < rank(*best)) best = it;
  return best;
}

void Authenticator::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (!held_ && !queue_.empty()); });
    if (stop_) return;
    auto next = next_job(Clock::now());
    if (next == queue_.end()) continue;
    Job j = std::move(*next);
    queue_.erase(next);
    int queued = Pending::kQueued;
    if (!j.pending->state_.compare_exchange_strong(queued, Pending::kRunning)) {
      // Withdrawn between the choice and now.
      asio::post(j.executor, [done = std::move(j.done)] { done(Verdict::kDenied); });
      continue;
    }
    ++hashed_;
    lock.unlock();
    const auto& users = j.security->config().basic_auth_users;
    auto it = users.find(j.user);
    const bool known = it != users.end();
    const bool match = verify(j.password, known ? it->second : dummy_hash(*j.security));
    const bool allowed = known && match;
    lock.lock();
    Standing& s = standing(j.client, Clock::now());
    if (allowed) {
      s.succeeded = true;
      s.failures = 0;
      if (cache_.size() >= kCacheMax) {
        // The oldest success goes first.
        auto oldest =
            std::min_element(cache_.begin(), cache_.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        cache_.erase(oldest);
      }
      cache_[j.key] = std::chrono::steady_clock::now();
    } else {
      s.failures += 1;
    }
    lock.unlock();
    asio::post(j.executor, [done = std::move(j.done), allowed] {
      done(allowed ? Verdict::kAllowed : Verdict::kDenied);
    });
    lock.lock();
  }
}

// --- RateLimiter ----------------------------------------------------------------

void RateLimiter::configure(std::chrono::nanoseconds interval, int burst) {
  if (interval == interval_ && burst_ == burst) return;
  interval_ = interval;
  burst_ = burst;
  buckets_.clear();
  by_key_.clear();
}

bool RateLimiter::allow(const asio::ip::address& client,
                        std::chrono::steady_clock::time_point now) {
  if (interval_.count() <= 0) return true;
  std::string key = client_key(client);
  auto found = by_key_.find(key);
  if (found == by_key_.end()) {
    if (buckets_.size() >= kMaxClients) {
      by_key_.erase(buckets_.back().key);
      buckets_.pop_back();
    }
    buckets_.push_front(Bucket{key, burst_, now});
    found = by_key_.emplace(std::move(key), buckets_.begin()).first;
  } else {
    buckets_.splice(buckets_.begin(), buckets_, found->second);
  }
  Bucket& b = *found->second;
  const double earned = std::chrono::duration<double>(now - b.last).count() /
                        std::chrono::duration<double>(interval_).count();
  b.tokens = std::min(burst_, b.tokens + std::max(0.0, earned));
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace nodewatch
