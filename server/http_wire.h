// HttpResponse and its bytes on the wire (HTTP/1.1, RFC 9112): a status line, the fields,
// then a body framed by Content-Length, by the chunked coding (a stream to an HTTP/1.1
// client) or by the end of the connection (a stream to an HTTP/1.0 client). 1xx, 204 and
// 304 responses carry no body and no Content-Length. Header values come from our own code
// and flags, never from a request; response_head drops a field whose name or value holds
// a CR or LF rather than let it split the head.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mt::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/-Length, Connection
  std::string body;
};

enum class Framing { kLength, kChunked, kClose };

// "OK", "Not Found", ...; "Unknown" for a status without a phrase here.
const char* reason_phrase(int status);

// The status line and fields, ending with the blank line. kLength gives Content-Length:
// body.size(); keep_alive picks "Connection: keep-alive" or "close".
std::string response_head(const HttpResponse& r, Framing framing, bool keep_alive);

// The whole response (head and body, or only the head for a HEAD request).
std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only);

// One chunk of a chunked body (nothing for empty data: an empty chunk would end it).
void append_chunk(std::string* out, std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace mt::server
