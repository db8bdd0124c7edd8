// The HTTP/1.1 request parser (server/http_parser.h) and the response bytes
// (server/http_wire.h): well-formed requests in every framing, split at every byte, and
// each malformed case with the status it must get.
#include <gtest/gtest.h>

#include <string>

#include "server/http_parser.h"
#include "server/http_wire.h"

namespace mt::server {
namespace {

struct Parsed {
  RequestParser::State state;
  size_t consumed;
  int status;
  HttpRequest request;
};

Parsed parse(std::string_view bytes, ParserLimits limits = {}) {
  RequestParser p(limits);
  const size_t n = p.feed(bytes);
  return {p.state(), n, p.error_status(), p.request()};
}

// The same bytes one at a time: the same outcome.
Parsed parse_bytewise(std::string_view bytes, ParserLimits limits = {}) {
  RequestParser p(limits);
  size_t n = 0;
  for (char c : bytes) {
    if (p.state() != RequestParser::State::kIncomplete) break;
    n += p.feed(std::string_view(&c, 1));
  }
  return {p.state(), n, p.error_status(), p.request()};
}

int error_of(std::string_view bytes, ParserLimits limits = {}) {
  const Parsed whole = parse(bytes, limits), split = parse_bytewise(bytes, limits);
  EXPECT_EQ(whole.state, RequestParser::State::kError) << bytes.substr(0, 200);
  EXPECT_EQ(split.state, whole.state);
  EXPECT_EQ(split.status, whole.status);
  return whole.status;
}

TEST(HttpParser, SimpleGet) {
  const std::string req = "GET /v1/models?x=1&y=2 HTTP/1.1\r\nHost: localhost\r\nX-Thing:  padded value \t\r\n\r\n";
  for (const Parsed& p : {parse(req), parse_bytewise(req)}) {
    ASSERT_EQ(p.state, RequestParser::State::kComplete);
    EXPECT_EQ(p.consumed, req.size());
    EXPECT_EQ(p.request.method, "GET");
    EXPECT_EQ(p.request.target, "/v1/models?x=1&y=2");
    EXPECT_EQ(p.request.path, "/v1/models");
    EXPECT_EQ(p.request.query, "x=1&y=2");
    EXPECT_EQ(p.request.minor_version, 1);
    EXPECT_TRUE(p.request.keep_alive);
    ASSERT_NE(p.request.header("x-thing"), nullptr);
    EXPECT_EQ(*p.request.header("x-thing"), "padded value");
    EXPECT_EQ(p.request.header("X-Thing"), nullptr);  // names are looked up in lower case
    EXPECT_TRUE(p.request.body.empty());
  }
}

TEST(HttpParser, IncompleteUntilTheBlankLine) {
  RequestParser p;
  EXPECT_FALSE(p.started());
  EXPECT_EQ(p.feed("GET / HTTP/1.1\r\nHost: a\r\n"), 25u);
  EXPECT_TRUE(p.started());
  EXPECT_EQ(p.state(), RequestParser::State::kIncomplete);
  EXPECT_FALSE(p.head_done());
  p.feed("\r\n");
  EXPECT_EQ(p.state(), RequestParser::State::kComplete);
}

TEST(HttpParser, KeepAliveRules) {
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  const Parsed old = parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  EXPECT_TRUE(old.request.keep_alive);
  EXPECT_EQ(old.request.minor_version, 0);
  EXPECT_EQ(parse("GET / HTTP/1.7\r\n\r\n").request.minor_version, 1);  // a later 1.x is read as 1.1
}

TEST(HttpParser, ContentLengthBodyAndPipelining) {
  const std::string first = "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
  const std::string both = first + "GET /b HTTP/1.1\r\n\r\n";
  RequestParser p;
  EXPECT_EQ(p.feed(both), first.size());
  ASSERT_EQ(p.state(), RequestParser::State::kComplete);
  EXPECT_EQ(p.request().body, "hello");
  EXPECT_EQ(p.feed("more"), 0u);  // complete: nothing more is taken
  p.reset();
  EXPECT_EQ(p.feed(std::string_view(both).substr(first.size())), both.size() - first.size());
  EXPECT_EQ(p.state(), RequestParser::State::kComplete);
  EXPECT_EQ(p.request().path, "/b");
  EXPECT_EQ(parse_bytewise(first).request.body, "hello");
  EXPECT_EQ(parse("POST /a HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhello").request.body, "hello");
}

TEST(HttpParser, ChunkedBody) {
  const std::string req =
      "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer-Field: x\r\n\r\n";
  for (const Parsed& p : {parse(req), parse_bytewise(req)}) {
    ASSERT_EQ(p.state, RequestParser::State::kComplete);
    EXPECT_EQ(p.consumed, req.size());
    EXPECT_EQ(p.request.body, "helloabcdefghijklmnopqrstuvwxyz");
  }
}

TEST(HttpParser, LenientWhereTheRfcAllows) {
  EXPECT_EQ(parse("\r\n\r\nGET / HTTP/1.1\r\n\r\n").state, RequestParser::State::kComplete);  // leading blank lines
  const Parsed lf = parse("POST /x HTTP/1.1\nContent-Length: 2\n\nok");  // bare LF line endings
  ASSERT_EQ(lf.state, RequestParser::State::kComplete);
  EXPECT_EQ(lf.request.body, "ok");
  const Parsed absolute = parse("GET http://example.com:8080/v1/models?q HTTP/1.1\r\n\r\n");
  EXPECT_EQ(absolute.request.path, "/v1/models");
  EXPECT_EQ(absolute.request.query, "q");
  EXPECT_EQ(parse("GET http://example.com HTTP/1.1\r\n\r\n").request.path, "/");
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\n\r\n").request.path, "/");
}

TEST(HttpParser, ExpectContinue) {
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n").request.expect_continue);
  EXPECT_FALSE(parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").request.expect_continue);  // no body
  RequestParser p;
  p.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_TRUE(p.head_done());
  EXPECT_EQ(p.state(), RequestParser::State::kIncomplete);
}

TEST(HttpParser, MalformedRequestLines) {
  EXPECT_EQ(error_of("GET /\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1 extra\r\n\r\n"), 400);
  EXPECT_EQ(error_of("G(T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / http/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1x\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(error_of("GET relative HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET ftp://x/ HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET * HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of(std::string("GET /a\x01 HTTP/1.1\r\n\r\n")), 400);
  EXPECT_EQ(error_of("GET /a\rb HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of(std::string("GET /\0 HTTP/1.1\r\n\r\n", 19)), 400);
  EXPECT_EQ(error_of(std::string("\x00\x01 garbage / NOT-HTTP\r\n\r\n", 25)), 400);
  EXPECT_EQ(error_of("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n"), 414);
  EXPECT_EQ(error_of(std::string(9000, 'a')), 414);  // no line end yet: still bounded
  EXPECT_EQ(error_of(std::string(40000, '\n')), 431);  // endless blank lines
}

TEST(HttpParser, MalformedHeaders) {
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nNo colon here\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nName : v\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\n: v\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"), 400);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(error_of(many + "\r\n"), 431);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nBig: " + std::string(40000, 'v') + "\r\n\r\n"), 431);
  EXPECT_EQ(error_of("GET / HTTP/1.1\r\nBig: " + std::string(40000, 'v')), 431);  // no line end yet
}

TEST(HttpParser, BodyFraming) {
  ParserLimits small;
  small.max_body = 10;
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", small), 413);  // before the body arrives
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(error_of("POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n"), 400);
  const std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(error_of(chunked + "xyz\r\n"), 400);
  EXPECT_EQ(error_of(chunked + "5 junk\r\n"), 400);
  EXPECT_EQ(error_of(chunked + "3\r\nabcX\r\n"), 400);  // no CRLF after the data
  EXPECT_EQ(error_of(chunked + "6\r\nabcdef\r\n6\r\nabcdef\r\n", small), 413);  // decoded total over the limit
  EXPECT_EQ(error_of(chunked + "ffffffffffffffffffffffff\r\n"), 413);
  EXPECT_EQ(error_of(chunked + "1;" + std::string(5000, 'e') + "\r\n"), 400);
  EXPECT_EQ(error_of(chunked + "0\r\nbad trailer\r\n\r\n"), 400);
}

TEST(HttpParser, ErrorStopsAndResetStartsOver) {
  RequestParser p;
  p.feed("BAD\r\n");
  ASSERT_EQ(p.state(), RequestParser::State::kError);
  EXPECT_FALSE(p.error_message().empty());
  EXPECT_EQ(p.feed("GET / HTTP/1.1\r\n\r\n"), 0u);
  p.reset();
  EXPECT_EQ(p.state(), RequestParser::State::kIncomplete);
  p.feed("GET /again HTTP/1.1\r\n\r\n");
  EXPECT_EQ(p.state(), RequestParser::State::kComplete);
  EXPECT_EQ(p.request().path, "/again");
}

TEST(HttpWire, Responses) {
  HttpResponse r;
  r.body = R"({"a":1})";
  r.headers = {{"X-Ok", "yes"}, {"X-Bad", "a\r\nInjected: 1"}};
  const std::string out = serialize_response(r, true, false);
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_NE(out.find("Content-Length: 7\r\n"), std::string::npos);
  EXPECT_NE(out.find("Connection: keep-alive\r\n"), std::string::npos);
  EXPECT_NE(out.find("X-Ok: yes\r\n"), std::string::npos);
  EXPECT_EQ(out.find("Injected"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 11), "\r\n\r\n" + r.body);
  EXPECT_EQ(serialize_response(r, false, true).find(r.body), std::string::npos);  // HEAD
  HttpResponse none;
  none.status = 204;
  const std::string empty = serialize_response(none, false, false);
  EXPECT_EQ(empty.find("Content-Length"), std::string::npos);
  EXPECT_NE(empty.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(response_head(r, Framing::kChunked, true).find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  std::string chunks;
  append_chunk(&chunks, std::string(26, 'z'));
  append_chunk(&chunks, "");
  EXPECT_EQ(chunks, "1a\r\n" + std::string(26, 'z') + "\r\n");
}

}  // namespace
}  // namespace mt::server
