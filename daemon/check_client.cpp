#include "check_client.hpp"

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <memory>

#include "asio.hpp"
#include "router.hpp"

namespace nodewatch {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Runs the request on `stream` once it is connected (and, for TLS, after
// `handshake`), filling `out`.
template <class Stream>
struct Exchange : std::enable_shared_from_this<Exchange<Stream>> {
  Stream& stream;
  FetchResult& out;
  http::request<http::empty_body> req;
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;

  Exchange(Stream& s, FetchResult& o, const std::string& host, const std::string& target)
      : stream(s), out(o), req(http::verb::get, target, 11) {
    req.set(http::field::host, host);
    req.set(http::field::user_agent, "nodewatchd --check");
    req.set(http::field::connection, "close");
    parser.body_limit(16 * 1024 * 1024);
  }
  void start() {
    auto self = this->shared_from_this();
    http::async_write(stream, req, [self](beast::error_code ec, std::size_t) {
      if (ec) {
        self->out.error = "sending the request: " + ec.message();
        return;
      }
      http::async_read(self->stream, self->buf, self->parser,
                       [self](beast::error_code ec2, std::size_t) {
                         if (ec2) {
                           self->out.error = "reading the response: " + ec2.message();
                           return;
                         }
                         auto& res = self->parser.get();
                         self->out.status = res.result_int();
                         self->out.body = res.body();
                         self->out.node_status = std::string(res[kNodeStatusHeader]);
                       });
    });
  }
};

}  // namespace

std::string printable_body(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (char c : body) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out.push_back(c);
    }
  }
  return out;
}

FetchResult fetch_local(const std::string& host, std::uint16_t port, bool tls,
                        const std::string& target, std::chrono::milliseconds timeout) {
  FetchResult out;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    out.error = "\"" + host + "\" is not an IP address";
    return out;
  }
  tcp::endpoint ep(address, port);
  std::string host_header = address.is_v6() ? "[" + host + "]:" + std::to_string(port)
                                            : host + ":" + std::to_string(port);
  asio::io_context io;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_verify_mode(asio::ssl::verify_none);
  if (tls) {
    auto stream = std::make_shared<beast::ssl_stream<beast::tcp_stream>>(io, ctx);
    beast::get_lowest_layer(*stream).expires_after(timeout);
    beast::get_lowest_layer(*stream).async_connect(ep, [&, stream](beast::error_code e) {
      if (e) {
        out.error = "connecting: " + e.message();
        return;
      }
      out.connected = true;
      stream->async_handshake(asio::ssl::stream_base::client, [&, stream](beast::error_code h) {
        if (h) {
          out.error = "TLS handshake: " + h.message();
          return;
        }
        std::make_shared<Exchange<beast::ssl_stream<beast::tcp_stream>>>(*stream, out, host_header,
                                                                         target)
            ->start();
      });
    });
    io.run_for(timeout + std::chrono::milliseconds(100));
  } else {
    auto stream = std::make_shared<beast::tcp_stream>(io);
    stream->expires_after(timeout);
    stream->async_connect(ep, [&, stream](beast::error_code e) {
      if (e) {
        out.error = "connecting: " + e.message();
        return;
      }
      out.connected = true;
      std::make_shared<Exchange<beast::tcp_stream>>(*stream, out, host_header, target)->start();
    });
    io.run_for(timeout + std::chrono::milliseconds(100));
  }
  if (out.status == 0 && out.error.empty()) out.error = "no answer within the timeout";
  return out;
}

}  // namespace nodewatch
