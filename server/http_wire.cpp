#include "server/http_wire.h"

#include <cstdio>

namespace mt::server {

namespace {

bool clean(std::string_view s) { return s.find_first_of("\r\n") == std::string_view::npos; }

bool has_body(int status) { return status >= 200 && status != 204 && status != 304; }

}  // namespace

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string response_head(const HttpResponse& r, Framing framing, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  if (has_body(r.status)) {
    if (!r.content_type.empty() && clean(r.content_type)) out += "Content-Type: " + r.content_type + "\r\n";
    if (framing == Framing::kLength) out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    if (framing == Framing::kChunked) out += "Transfer-Encoding: chunked\r\n";
  }
  out += keep_alive && framing != Framing::kClose ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : r.headers) {
    if (!name.empty() && clean(name) && clean(value)) out += name + ": " + value + "\r\n";
  }
  out += "\r\n";
  return out;
}

std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only) {
  std::string out = response_head(r, Framing::kLength, keep_alive);
  if (!head_only && has_body(r.status)) out += r.body;
  return out;
}

void append_chunk(std::string* out, std::string_view data) {
  if (data.empty()) return;
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out->append(size, static_cast<size_t>(n));
  out->append(data);
  out->append("\r\n");
}

}  // namespace mt::server
