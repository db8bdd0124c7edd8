// RequestParser: HTTP/1.1 requests (RFC 9112) read from untrusted bytes, incrementally. It
// is a pure state machine (no sockets, no clocks): bytes go in through feed() in pieces of
// any size, and the result is the same however the input was split. Each request ends in
// one of two states: complete (method, target, headers, body) or an error carrying the
// status to answer with: 400 malformed, 411/501 a body framing we do not take, 413 a body
// over the limit (known from Content-Length before the body arrives), 414 a request line
// over the limit, 431 a head over the limit or too many header fields, 505 a version other
// than HTTP/1.0 or 1.1. Bodies come with Content-Length or chunked transfer coding (the
// decoded size counts against the limit); both at once is refused (request smuggling).
// Memory held is bounded by the limits, whatever the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt::server {

struct HttpHeader {
  std::string name;  // lower case
  std::string value;  // surrounding blanks removed
};

struct HttpRequest {
  std::string method;  // as sent (methods are case-sensitive)
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // the target without its query ("/" for "*" and an empty absolute-form path)
  std::string query;   // after '?', without it
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<HttpHeader> headers;
  std::string body;
  bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; 1.0 only with "keep-alive"
  bool expect_continue = false;  // "Expect: 100-continue" with a body to come

  // The value of the first field named `lower_name` (lower case), or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

struct ParserLimits {
  size_t max_request_line = 8192;  // bytes of the request line; 414 beyond
  size_t max_head = 32 << 10;      // request line + header fields (+ chunked trailers); 431 beyond
  size_t max_headers = 100;        // header fields; 431 beyond
  size_t max_body = size_t{8} << 20;  // 413 beyond
};

class RequestParser {
 public:
  enum class State { kIncomplete, kComplete, kError };

  explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}

  // Consumes bytes of the current request and returns how many: all of `data` while the
  // request is incomplete, fewer once it completes (the rest belongs to the next request).
  // After an error the count says nothing (the connection is answered and closed). In
  // kComplete and kError it consumes nothing.
  size_t feed(std::string_view data);

  State state() const { return state_; }
  bool started() const { return started_; }    // a byte of this request was consumed
  bool head_done() const { return phase_ > Phase::kHeaders; }  // the body (if any) is being read
  HttpRequest& request() { return request_; }  // complete once state() is kComplete
  const HttpRequest& request() const { return request_; }
  int error_status() const { return error_status_; }  // kError: 400, 411, 413, 414, 431, 501 or 505
  const std::string& error_message() const { return error_message_; }

  // Starts over for the next request of the connection.
  void reset();

 private:
  enum class Phase { kRequestLine, kHeaders, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers, kDone };

  bool fail(int status, std::string message);
  // Appends to line_ up to and including '\n'; true when the line is complete (line_ then
  // holds it without its line ending). Fails with `status` when line_ grows past `limit`.
  bool take_line(std::string_view data, size_t* pos, size_t limit, int status, const char* what);
  bool on_request_line();
  bool on_header_line();
  bool on_head_end();
  bool on_chunk_size();
  size_t take_body(std::string_view data, size_t pos);  // returns the new pos

  ParserLimits limits_;
  State state_ = State::kIncomplete;
  Phase phase_ = Phase::kRequestLine;
  bool started_ = false;
  std::string line_;          // the line being read
  size_t head_bytes_ = 0;     // bytes of the head (and trailers) so far
  uint64_t remaining_ = 0;    // kBody / kChunkData: bytes still to come
  bool chunked_ = false;
  HttpRequest request_;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace mt::server
