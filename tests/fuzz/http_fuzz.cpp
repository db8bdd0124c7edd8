// libFuzzer target for the HTTP request parser (server/http_parser.h): the input is a
// connection's bytes. They are parsed twice, in one piece and in pieces whose sizes the
// first byte picks, and both runs must agree on everything (state, bytes consumed, status,
// method, target, headers, body): the parser's result may not depend on how the bytes
// arrived. Every request found must respect the limits (small ones, so they are reached);
// an error carries a status from the documented set and stops the parser; the bytes after
// a complete request are parsed as the next one, as the loop does with pipelining.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_parser.h"

namespace {

using mt::server::HttpRequest;
using mt::server::ParserLimits;
using mt::server::RequestParser;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_fuzz: broken promise: %s\n", what);
  std::abort();
}

struct Outcome {
  RequestParser::State state;
  size_t consumed;
  int status;
  HttpRequest request;
};

Outcome run(std::string_view data, const ParserLimits& limits, size_t piece) {
  RequestParser p(limits);
  size_t consumed = 0;
  while (consumed < data.size() && p.state() == RequestParser::State::kIncomplete) {
    const std::string_view part = data.substr(consumed, piece == 0 ? data.size() : piece);
    const size_t n = p.feed(part);
    require(n <= part.size(), "feed consumed more than it was given");
    require(n == part.size() || p.state() != RequestParser::State::kIncomplete, "an incomplete request left bytes");
    consumed += n;
    if (n < part.size()) break;
  }
  return {p.state(), consumed, p.error_status(), p.request()};
}

void check_request(const HttpRequest& r, const ParserLimits& limits) {
  require(!r.method.empty() && r.method.size() <= 32, "method");
  require(!r.path.empty() && r.path[0] == '/', "path");
  require(r.minor_version == 0 || r.minor_version == 1, "version");
  require(r.headers.size() <= limits.max_headers, "header count");
  require(r.body.size() <= limits.max_body, "body size");
  for (const auto& h : r.headers) {
    for (char c : h.name) require(!(c >= 'A' && c <= 'Z'), "header name not lower case");
    require(h.value.find_first_of("\r\n") == std::string::npos, "CR or LF in a header value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size == 0) return 0;
  ParserLimits limits;
  limits.max_request_line = 256;
  limits.max_head = 1024;
  limits.max_headers = 8;
  limits.max_body = 512;
  const size_t piece = bytes[0] % 8;  // 0: all at once
  std::string_view data(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  for (int request = 0; request < 8 && !data.empty(); ++request) {
    const Outcome whole = run(data, limits, 0), split = run(data, limits, piece == 0 ? 1 : piece);
    require(whole.state == split.state && whole.status == split.status,
            "the outcome depends on how the bytes were split");
    require(whole.state == RequestParser::State::kError || whole.consumed == split.consumed,
            "the request's length depends on how the bytes were split");
    require(whole.request.method == split.request.method && whole.request.target == split.request.target &&
                whole.request.body == split.request.body && whole.request.headers.size() == split.request.headers.size(),
            "the request depends on how the bytes were split");
    if (whole.state == RequestParser::State::kError) {
      const int s = whole.status;
      require(s == 400 || s == 411 || s == 413 || s == 414 || s == 431 || s == 501 || s == 505, "error status");
      return 0;
    }
    if (whole.state != RequestParser::State::kComplete) return 0;
    check_request(whole.request, limits);
    require(whole.consumed > 0, "a complete request of no bytes");
    data.remove_prefix(whole.consumed);  // the next pipelined request
  }
  return 0;
}
