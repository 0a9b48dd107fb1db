// HTTP rules a client relies on beyond the API itself: HEAD, Allow, OPTIONS, CORS, HTTP/1.0
// streaming, the access log's line format.
#include <array>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fake_backend.h"
#include "harness.h"
#include "server/access_log.h"
#include "server/cors.h"
#include "test_client.h"

namespace optimate::server {
namespace {

using testing::Harness;
using testing::TestClient;
namespace http = boost::beast::http;

// The whole reply to a request written as raw bytes on a connection of its own.
std::string raw_reply(const Harness& h, const std::string& request) {
  TestClient c(h.port());
  c.send_raw(request);
  return c.read_until_closed();
}

std::string header(const testing::Reply& r, const char* name) {
  auto it = r.message.find(name);
  return it == r.message.end() ? std::string() : std::string(it->value());
}

TEST(HttpProtocol, HeadAnswersGetRoutesWithHeadersOnlyAndTheConnectionSurvives) {
  Harness h;
  TestClient c(h.port());
  const auto get = c.get("/v1/models");
  ASSERT_EQ(get.status, 200);
  const auto head = c.request_with(http::verb::head, "/v1/models", {});
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(header(head, "Content-Length"), std::to_string(get.body.size()));
  EXPECT_EQ(header(head, "Content-Type"), "application/json");
  // A body after the HEAD response would be read as the next status line.
  EXPECT_EQ(c.get("/health").status, 200);
  // Errors to HEAD carry no body either.
  const auto missing = c.request_with(http::verb::head, "/nope", {});
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.body.empty());
  EXPECT_EQ(c.get("/v1/models").body, get.body);
}

TEST(HttpProtocol, MethodNotAllowedNamesTheAllowedMethods) {
  Harness h;
  TestClient c(h.port());
  const auto get_post_route = c.get("/v1/completions");
  EXPECT_EQ(get_post_route.status, 405);
  EXPECT_EQ(header(get_post_route, "Allow"), "OPTIONS, POST");
  EXPECT_EQ(get_post_route.json()["error"]["code"], 405);
  const auto put_health = c.request(http::verb::put, "/health");
  EXPECT_EQ(put_health.status, 405);
  EXPECT_EQ(header(put_health, "Allow"), "GET, HEAD, OPTIONS");
  const auto head_post_route = c.request_with(http::verb::head, "/v1/completions", {});
  EXPECT_EQ(head_post_route.status, 405);
  EXPECT_TRUE(head_post_route.body.empty());
  EXPECT_EQ(c.get("/health").status, 200);
}

TEST(HttpProtocol, OptionsListsMethodsWithoutTheApiKey) {
  Harness h("sekret");
  TestClient c(h.port());
  const auto r = c.request(http::verb::options, "/v1/models");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r, "Allow"), "GET, HEAD, OPTIONS");
  EXPECT_EQ(c.request(http::verb::options, "/nope").status, 404);
  // HEAD is a GET: the key is still needed.
  EXPECT_EQ(c.request_with(http::verb::head, "/v1/models", {}).status, 401);
}

TEST(HttpProtocol, CorsByDefaultAllowsAnyOriginWithoutCredentials) {
  Harness h("sekret");
  TestClient c(h.port());
  const auto preflight = c.request_with(http::verb::options, "/v1/chat/completions",
                                        {{"Origin", "https://app.example"},
                                         {"Access-Control-Request-Method", "POST"},
                                         {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(preflight.status, 200);  // answered before authentication, as browsers send no key
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Origin"), "*");
  EXPECT_NE(header(preflight, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Credentials"), "");
  const auto actual = c.request_with(http::verb::get, "/v1/models",
                                     {{"Origin", "https://app.example"}, {"Authorization", "Bearer sekret"}});
  EXPECT_EQ(actual.status, 200);
  EXPECT_EQ(header(actual, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(c.get("/health"), "Access-Control-Allow-Origin"), "");  // no Origin: not CORS
}

TEST(HttpProtocol, CorsRestrictedToListedOriginsWithCredentials) {
  HttpOptions options = Harness::options();
  options.cors.allowed_origins = {"https://ok.example"};
  options.cors.allowed_methods = {"GET", "POST"};
  options.cors.allowed_headers = {"Authorization"};
  options.cors.allow_credentials = true;
  Harness h({}, ApiOptions{}, options);
  TestClient c(h.port());
  const auto bad = c.request_with(http::verb::options, "/v1/models",
                                  {{"Origin", "https://evil.example"},
                                   {"Access-Control-Request-Method", "DELETE"},
                                   {"Access-Control-Request-Headers", "X-Custom"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body, "Disallowed CORS origin, method, headers");
  const auto good = c.request_with(http::verb::options, "/v1/models",
                                   {{"Origin", "https://ok.example"},
                                    {"Access-Control-Request-Method", "GET"},
                                    {"Access-Control-Request-Headers", "authorization"}});
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(header(good, "Access-Control-Allow-Origin"), "https://ok.example");
  EXPECT_EQ(header(good, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(good, "Vary"), "Origin");
  const auto actual = c.request_with(http::verb::get, "/v1/models", {{"Origin", "https://ok.example"}});
  EXPECT_EQ(header(actual, "Access-Control-Allow-Origin"), "https://ok.example");
  const auto other = c.request_with(http::verb::get, "/v1/models", {{"Origin", "https://evil.example"}});
  EXPECT_EQ(header(other, "Access-Control-Allow-Origin"), "");
}

TEST(HttpProtocol, CorsFlagValuesTakeJsonOrCommaLists) {
  EXPECT_EQ(parse_cors_list("--allowed-origins", R"(["https://a.example", "http://b:3000"])"),
            (std::vector<std::string>{"https://a.example", "http://b:3000"}));
  EXPECT_EQ(parse_cors_list("--allowed-methods", "GET, POST"), (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(parse_cors_list("--allowed-headers", R"(["*"])"), (std::vector<std::string>{"*"}));
  EXPECT_THROW(parse_cors_list("--allowed-origins", "[1, 2]"), Error);
  EXPECT_THROW(parse_cors_list("--allowed-origins", "[\"a\""), Error);
}

TEST(HttpProtocol, StreamToHttp10ClientIsCloseDelimited) {
  Harness h;
  const std::string body = R"({"prompt":"hi","max_tokens":3,"stream":true})";
  const std::string reply =
      raw_reply(h, "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  const size_t end_of_head = reply.find("\r\n\r\n");
  ASSERT_NE(end_of_head, std::string::npos) << reply;
  const std::string head = reply.substr(0, end_of_head);
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  const std::string events = reply.substr(end_of_head + 4);
  EXPECT_EQ(events.rfind("data: {", 0), 0u) << events;  // raw events, no chunk sizes
  EXPECT_TRUE(events.ends_with("data: [DONE]\n\n")) << events;
  EXPECT_NE(events.find("\"finish_reason\":\"length\""), std::string::npos);
}

TEST(HttpProtocol, Http10NonStreamingKeepsContentLength) {
  Harness h;
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  const std::string reply =
      raw_reply(h, "POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(reply.find("Content-Length: "), std::string::npos) << reply;
  EXPECT_NE(reply.find("\"text\":\"ab\""), std::string::npos) << reply;
}

// A body in a transfer coding besides chunked (RFC 9112: 501) is refused, not read as plain
// chunks; plain chunked bodies are served.
TEST(HttpProtocol, ATransferCodingOtherThanChunkedIs501) {
  Harness h;
  const std::string chunk = R"({"prompt":"hi","max_tokens":2})";
  auto send = [&](const std::string& coding) {
    return raw_reply(h, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Transfer-Encoding: " + coding + "\r\nConnection: close\r\n\r\n" +
                        fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", chunk.size(), chunk));
  };
  const std::string gzip = send("gzip, chunked");
  EXPECT_EQ(gzip.rfind("HTTP/1.1 501", 0), 0u) << gzip;
  EXPECT_NE(gzip.find("gzip, chunked"), std::string::npos) << gzip;
  const std::string plain = send("chunked");
  EXPECT_EQ(plain.rfind("HTTP/1.1 200", 0), 0u) << plain;
}

// Targets route as the ASGI servers vLLM runs on route them: an absolute-form target by its path
// (RFC 9112 3.2.2) and percent-encoded bytes as the bytes they stand for.
TEST(HttpProtocol, AbsoluteFormAndPercentEncodedTargetsRouteByTheirPath) {
  Harness h;
  auto get = [&](const std::string& target) {
    return raw_reply(h, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  };
  for (const char* target : {"http://x/health", "HTTP://127.0.0.1:9/v1/models?x=1", "/v1/%6dodels", "/%68ealth"})
    EXPECT_EQ(get(target).rfind("HTTP/1.1 200", 0), 0u) << target;
  EXPECT_EQ(get("/v1/models%zz").rfind("HTTP/1.1 404", 0), 0u);  // not an escape: the path as sent
}

// HTTP/1.1 without Host is a 400, as h11 answers it; HTTP/1.0 needs none.
TEST(HttpProtocol, Http11WithoutHostIs400) {
  Harness h;
  auto get = [&](const std::string& version) {
    return raw_reply(h, "GET /health " + version + "\r\nConnection: close\r\n\r\n");
  };
  const std::string missing = get("HTTP/1.1");
  EXPECT_EQ(missing.rfind("HTTP/1.1 400", 0), 0u) << missing;
  EXPECT_NE(missing.find("Host"), std::string::npos) << missing;
  EXPECT_EQ(get("HTTP/1.0").rfind("HTTP/1.1 200", 0), 0u);
}

// The write timeout runs from the last byte the client took: a client that reads a response
// of megabytes slowly, but keeps reading, gets all of it (timed from the start of the write, a
// response that took the client longer than the timeout to read was cut off). The response,
// 7 MB, is more than the kernel's socket buffers hold (4 MiB at most for the sender's): read
// 16 KB every 5 ms, the server's write lasts until about 4 MiB are left unread, near 1 s, twice
// the timeout. This one waits on the real clock: the kernel moves bytes from the server's
// socket buffer to the client's without the server running, so no clock a test could skip says
// when the server last saw progress.
TEST(HttpProtocol, AClientThatKeepsReadingSlowlyGetsTheWholeResponse) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  HttpOptions options = Harness::options();
  options.write_timeout_s = 0.5;
  Harness h({}, ApiOptions{-1, "9.9.9"}, options);
  h.backend.set_max_model_len(1 << 20);
  const std::string prompt(900'000, 'a');
  const std::string body = R"({"prompt":")" + prompt + R"(","max_tokens":1,"echo":true,"n":8})";
  net::io_context ioc;
  tcp::socket socket(ioc);
  socket.open(tcp::v4());
  socket.set_option(net::socket_base::receive_buffer_size(16 * 1024));
  socket.connect({net::ip::make_address("127.0.0.1"), h.port()});
  net::write(socket, net::buffer(testing::raw_post("/v1/completions", body)));
  std::string reply;
  std::array<char, 16 * 1024> chunk;
  size_t expected = std::string::npos;  // head and body, once the head is in
  while (reply.size() < expected) {
    boost::system::error_code ec;
    reply.append(chunk.data(), socket.read_some(net::buffer(chunk), ec));
    if (ec) break;
    const size_t end_of_head = reply.find("\r\n\r\n");
    const size_t length = reply.find("Content-Length: ");
    if (expected == std::string::npos && end_of_head != std::string::npos && length < end_of_head)
      expected = end_of_head + 4 + std::stoul(reply.substr(length + 16));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(expected, std::string::npos) << reply.substr(0, 300);
  ASSERT_EQ(reply.size(), expected) << "the response was cut off";
  const nlohmann::json response = nlohmann::json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  ASSERT_EQ(response["choices"].size(), 8u);
  for (const auto& choice : response["choices"])
    EXPECT_TRUE(choice["text"].get<std::string>().starts_with(prompt));
}

TEST(AccessLog, OneEscapedLinePerRequest) {
  AccessRecord r{"127.0.0.1:5000", "GET", "/v1/models?x=\"a\"\n\x01", 11, 200, 42, 0.0314};
  EXPECT_EQ(format_access_line(r),
            "127.0.0.1:5000 \"GET /v1/models?x=\\x22a\\x22\\x0a\\x01 HTTP/1.1\" 200 42B 0.031s");
  AccessRecord cut{"-", "-", std::string(600, 'a'), 10, 0, 0, 0.0};
  const std::string line = format_access_line(cut);
  EXPECT_NE(line.find(std::string(512, 'a') + "... HTTP/1.0\" - 0B"), std::string::npos) << line;
}

}  // namespace
}  // namespace optimate::server
