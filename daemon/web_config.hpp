#pragma once
// The web configuration file (--web.config.file, server.web_config_file):
// the Prometheus exporter-toolkit's YAML format, key for key, so that the
// files SREs already keep for node_exporter work unchanged.
//
//   tls_server_config:
//     cert_file, key_file             PEM files (or cert, key: inline PEM)
//     client_auth_type                NoClientCert (default), RequestClientCert,
//                                     RequireAnyClientCert, VerifyClientCertIfGiven,
//                                     RequireAndVerifyClientCert
//     client_ca_file                  CAs that verify client certificates (or
//                                     client_ca; none: the system's)
//     client_allowed_sans             a verified client's certificate must
//                                     carry one of these SANs (DNS, IP, e-mail, URI)
//     min_version, max_version        TLS10 TLS11 TLS12 TLS13 (default TLS12..TLS13)
//     cipher_suites                   Go's names for TLS 1.2 suites (TLS 1.3's
//                                     are not configurable, as in Go)
//     curve_preferences               CurveP256 CurveP384 CurveP521 X25519
//     prefer_server_cipher_suites     accepted, ignored (Go ignores it too)
//   http_server_config:
//     http2                           accepted; HTTP/2 is not served (logged)
//     headers                         added to every response; only the
//                                     security headers the toolkit allows
//   basic_auth_users:                 user: bcrypt hash ($2a$, $2b$, $2y$)
//   rate_limit:                       interval (Go duration), burst: a token
//                                     bucket per client address; past it, 429
//
// Parsing is strict: an unknown key, a wrong type or value is an error with
// the file's line and column, as in the main configuration. The files the
// configuration names are read when a TLS context is made from it
// (web_security.hpp), not here.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"

namespace nodewatch {

enum class ClientAuth {
  kNone,              // NoClientCert
  kRequest,           // RequestClientCert: asked for, not verified
  kRequireAny,        // RequireAnyClientCert: required, not verified
  kVerifyIfGiven,     // VerifyClientCertIfGiven
  kRequireAndVerify,  // RequireAndVerifyClientCert
};

// 0x0301 (TLS 1.0) ... 0x0304 (TLS 1.3), as OpenSSL's TLS1_x_VERSION.
using TlsVersion = int;

struct TlsServerConfig {
  std::string cert_file;  // resolved against the web configuration's directory
  std::string key_file;
  std::string cert;       // inline PEM (cert_file wins when both are set)
  std::string key;        // inline PEM (key_file wins)
  std::string client_ca;  // inline PEM (client_ca_file wins)
  ClientAuth client_auth = ClientAuth::kNone;
  std::string client_ca_file;
  std::vector<std::string> client_allowed_sans;
  TlsVersion min_version = 0x0303;
  TlsVersion max_version = 0x0304;
  std::vector<std::string> cipher_suites;      // Go's names (IANA's), TLS 1.2 only
  std::vector<std::string> curve_preferences;  // OpenSSL's group names
  bool operator==(const TlsServerConfig&) const = default;
};

struct WebConfig {
  std::string source;                  // the file
  std::optional<TlsServerConfig> tls;  // none: plain HTTP
  std::vector<std::pair<std::string, std::string>> headers;
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
  bool http2_asked = false;  // http2: true written (it is the default; never served)
  // rate_limit: a token bucket per client address (RateLimiter,
  // web_security.hpp); interval 0 is off.
  std::chrono::nanoseconds rate_interval{0};
  int rate_burst = 0;
  bool operator==(const WebConfig&) const = default;
};

struct WebConfigResult {
  std::optional<WebConfig> config;  // set only when errors is empty
  std::vector<ConfigError> errors;
};

// Parses `text` as the file `file` (relative paths in it are resolved
// against the file's directory, as the toolkit does).
WebConfigResult parse_web_config(std::string_view text, const std::string& file);
// Reads and parses `path` (at most kMaxConfigBytes).
WebConfigResult load_web_config(const std::string& path);

// A bcrypt hash as crypt(3) takes it: $2a$, $2b$ or $2y$, a two-digit cost
// 04..31, 53 characters of bcrypt's base 64.
bool is_bcrypt_hash(std::string_view hash);
// Go's duration syntax ("1s", "500ms", "1m30s", "0").
std::optional<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

}  // namespace nodewatch
