// The adapters' HTTPS client verifies the peer: the certificate must chain to
// a trusted CA and name the host. A throwaway CA and a Python TLS server on
// loopback stand in for the platform.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/process.hpp>
#include <filesystem>
#include <fstream>

#include "cluster.h"
#include "common/crypto.h"
#include "http/client.h"

using namespace opgate;
namespace bp = boost::process;

namespace {

struct TlsServer {
  std::filesystem::path dir;
  bp::child child;
  int port = 0;

  TlsServer() {
    dir = std::filesystem::temp_directory_path() / ("opgate-tls-" + crypto::random_hex(6));
    std::filesystem::create_directories(dir);
    const auto cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
    int rc = bp::system(bp::search_path("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-days", "1", "-keyout", key, "-out", cert, bp::std_out > bp::null,
                        bp::std_err > bp::null);
    REQUIRE(rc == 0);
    std::ofstream(dir / "server.py") << fmt::format(R"(import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("{}", "{}")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
)",
                                                    cert, key);
    child = bp::child(bp::search_path("python3"), (dir / "server.py").string(), bp::std_out > out,
                      bp::std_err > bp::null);
    std::string line;
    REQUIRE(std::getline(out, line));
    port = std::stoi(line);
  }
  ~TlsServer() {
    std::error_code ec;
    child.terminate(ec);
    std::filesystem::remove_all(dir, ec);
  }
  std::string cert() const { return (dir / "cert.pem").string(); }
  bp::ipstream out;
};

}  // namespace

TEST_CASE("https with a trusted certificate for the host succeeds") {
  TlsServer server;
  http::ClientRequest req;
  req.url = fmt::format("https://localhost:{}/", server.port);
  req.ca_file = server.cert();
  auto res = http::send(req);
  REQUIRE_MESSAGE(res.ok(), res.error().message);
  CHECK(res->status == 200);
  CHECK(res->body == "ok");
}

TEST_CASE("https refuses an untrusted certificate and one for another host name") {
  TlsServer server;
  http::ClientRequest untrusted;
  untrusted.url = fmt::format("https://localhost:{}/", server.port);
  auto a = http::send(untrusted);  // system store: our throwaway CA is not in it
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().code == "tls_failed");
  CHECK_FALSE(http::may_have_reached_peer(a.error()));

  http::ClientRequest wrong_name;
  wrong_name.url = fmt::format("https://127.0.0.1:{}/", server.port);  // cert names localhost
  wrong_name.ca_file = server.cert();
  auto b = http::send(wrong_name);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().code == "tls_failed");
}
