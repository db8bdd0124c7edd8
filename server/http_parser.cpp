#include "server/http_parser.h"

#include <algorithm>

namespace mt::server {

namespace {

constexpr size_t kMaxChunkLine = 4096;  // a chunk-size line with its extensions

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated elements of a field value, trimmed, empty ones dropped.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    const size_t comma = v.find(',');
    std::string_view item = trim(v.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

// "HTTP/1.1" -> 1; -1 when malformed; -2 when a well-formed version other than 1.x.
int parse_version(std::string_view v) {
  if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || v[6] != '.') return -1;
  const char major = v[5], minor = v[7];
  if (major < '0' || major > '9' || minor < '0' || minor > '9') return -1;
  if (major != '1') return -2;
  return minor == '0' ? 0 : 1;  // 1.2 and later minors are read as 1.1
}

bool valid_target(std::string_view t) {
  return !t.empty() && std::none_of(t.begin(), t.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

}  // namespace

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const HttpHeader& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

void RequestParser::reset() {
  state_ = State::kIncomplete;
  phase_ = Phase::kRequestLine;
  started_ = false;
  line_.clear();
  head_bytes_ = 0;
  remaining_ = 0;
  chunked_ = false;
  request_ = HttpRequest{};
  error_status_ = 0;
  error_message_.clear();
}

bool RequestParser::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return false;
}

bool RequestParser::take_line(std::string_view data, size_t* pos, size_t limit, int status, const char* what) {
  const size_t nl = data.find('\n', *pos);
  const size_t end = nl == std::string_view::npos ? data.size() : nl;
  if (line_.size() + (end - *pos) > limit) {
    return fail(status, std::string(what) + " is longer than the limit of " + std::to_string(limit) + " bytes");
  }
  line_.append(data.substr(*pos, end - *pos));
  *pos = nl == std::string_view::npos ? end : nl + 1;
  if (nl == std::string_view::npos) return false;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.find('\r') != std::string::npos || line_.find('\0') != std::string::npos) {
    return fail(400, std::string(what) + " contains a bare CR or a NUL byte");
  }
  return true;
}

bool RequestParser::on_request_line() {
  const std::string_view line = line_;
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "malformed request line (want: METHOD TARGET HTTP/1.1)");
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const int version = parse_version(line.substr(sp2 + 1));
  if (version == -1 || !is_token(method) || method.size() > 32 || !valid_target(target)) {
    return fail(400, "malformed request line (want: METHOD TARGET HTTP/1.1)");
  }
  if (version == -2) return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.minor_version = version;
  std::string_view path = target;
  if (target == "*") {
    if (method != "OPTIONS") return fail(400, "the target * is only for OPTIONS");
    path = "/";
  } else if (target.front() != '/') {
    // absolute-form: scheme://authority[/path]
    const size_t scheme = target.find("://");
    if (scheme == std::string_view::npos || !(iequals(target.substr(0, scheme), "http") ||
                                              iequals(target.substr(0, scheme), "https"))) {
      return fail(400, "the request target must be a path (/...) or an http URL");
    }
    const size_t slash = target.find('/', scheme + 3);
    path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  const size_t q = path.find('?');
  request_.path = std::string(path.substr(0, q));
  if (request_.path.empty()) request_.path = "/";
  if (q != std::string_view::npos) request_.query = std::string(path.substr(q + 1));
  phase_ = Phase::kHeaders;
  return true;
}

bool RequestParser::on_header_line() {
  const std::string_view line = line_;
  if (line.front() == ' ' || line.front() == '\t') return fail(400, "obsolete line folding in a header field");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
    return fail(400, "malformed header field (want: Name: value)");
  }
  const std::string_view value = trim(line.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return (u < 0x20 && u != '\t') || u == 0x7f;
      })) {
    return fail(400, "a header field value contains a control character");
  }
  if (request_.headers.size() >= limits_.max_headers) {
    return fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
  }
  request_.headers.push_back({to_lower(line.substr(0, colon)), std::string(value)});
  return true;
}

bool RequestParser::on_head_end() {
  HttpRequest& r = request_;
  bool has_length = false, has_te = false, close = false, keep_alive = false;
  uint64_t length = 0;
  std::vector<std::string_view> codings;
  for (const HttpHeader& h : r.headers) {
    if (h.name == "content-length") {
      for (std::string_view v : split_list(h.value)) {
        if (!std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return fail(400, "Content-Length is not a number");
        }
        if (v.size() > 18) return fail(413, "the body is larger than the limit of " + std::to_string(limits_.max_body) + " bytes");
        uint64_t n = 0;
        for (char c : v) n = n * 10 + static_cast<uint64_t>(c - '0');
        if (has_length && n != length) return fail(400, "conflicting Content-Length values");
        has_length = true;
        length = n;
      }
      if (!has_length) return fail(400, "Content-Length is empty");
    } else if (h.name == "transfer-encoding") {
      has_te = true;
      for (std::string_view c : split_list(h.value)) codings.push_back(c);
    } else if (h.name == "connection") {
      for (std::string_view c : split_list(h.value)) {
        close = close || iequals(c, "close");
        keep_alive = keep_alive || iequals(c, "keep-alive");
      }
    }
  }
  r.keep_alive = !close && (r.minor_version >= 1 || keep_alive);
  if (has_te && has_length) return fail(400, "both Transfer-Encoding and Content-Length");
  if (has_te) {
    if (codings.size() != 1 || !iequals(codings[0], "chunked")) {
      return fail(codings.empty() ? 400 : 501, "only the chunked transfer coding is accepted for request bodies");
    }
    chunked_ = true;
  }
  if (has_length && length > limits_.max_body) {
    return fail(413, "the body is larger than the limit of " + std::to_string(limits_.max_body) + " bytes");
  }
  if (const std::string* expect = r.header("expect")) {
    r.expect_continue = iequals(*expect, "100-continue") && (chunked_ || length > 0);
  }
  if (chunked_) {
    phase_ = Phase::kChunkSize;
  } else if (length > 0) {
    remaining_ = length;
    phase_ = Phase::kBody;
  } else {
    phase_ = Phase::kDone;
  }
  return true;
}

bool RequestParser::on_chunk_size() {
  std::string_view line = line_;
  uint64_t size = 0;
  size_t digits = 0;
  for (; digits < line.size(); ++digits) {
    const char c = lower(line[digits]);
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    if (size > (uint64_t{1} << 40)) return fail(413, "a chunk is larger than the body limit");
    size = size * 16 + static_cast<uint64_t>(d);
  }
  const std::string_view rest = trim(line.substr(digits));
  if (digits == 0 || (!rest.empty() && rest.front() != ';')) return fail(400, "malformed chunk size line");
  if (request_.body.size() + size > limits_.max_body) {
    return fail(413, "the body is larger than the limit of " + std::to_string(limits_.max_body) + " bytes");
  }
  remaining_ = size;
  phase_ = size == 0 ? Phase::kTrailers : Phase::kChunkData;
  return true;
}

size_t RequestParser::take_body(std::string_view data, size_t pos) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - pos));
  request_.body.append(data.substr(pos, n));
  remaining_ -= n;
  if (remaining_ == 0) phase_ = chunked_ ? Phase::kChunkEnd : Phase::kDone;
  return pos + n;
}

size_t RequestParser::feed(std::string_view data) {
  size_t pos = 0;
  while (state_ == State::kIncomplete && pos < data.size()) {
    started_ = true;
    const size_t before = pos;
    switch (phase_) {
      case Phase::kRequestLine:
        if (!take_line(data, &pos, limits_.max_request_line, 414, "the request line")) break;
        head_bytes_ += line_.size() + 2;
        if (!line_.empty()) on_request_line();  // empty lines before the request line are skipped
        if (state_ == State::kIncomplete && head_bytes_ > limits_.max_head) {
          fail(431, "the request head is larger than the limit");
        }
        line_.clear();
        break;
      case Phase::kHeaders:
      case Phase::kTrailers: {
        const size_t left = limits_.max_head - std::min(head_bytes_, limits_.max_head);
        if (!take_line(data, &pos, left, 431, "the request head")) break;
        head_bytes_ += line_.size() + 2;
        const bool headers = phase_ == Phase::kHeaders;
        if (line_.empty()) {
          if (headers) on_head_end();
          else phase_ = Phase::kDone;
        } else if (headers) {
          on_header_line();
        } else if (line_.find(':') == std::string::npos || line_.front() == ' ' || line_.front() == '\t') {
          fail(400, "malformed trailer field");
        }
        line_.clear();
        break;
      }
      case Phase::kBody:
      case Phase::kChunkData:
        pos = take_body(data, pos);
        break;
      case Phase::kChunkSize:
        if (!take_line(data, &pos, kMaxChunkLine, 400, "a chunk size line")) break;
        on_chunk_size();
        line_.clear();
        break;
      case Phase::kChunkEnd:
        if (!take_line(data, &pos, 1, 400, "the line after a chunk")) break;
        if (!line_.empty()) fail(400, "a chunk is not followed by CRLF");
        phase_ = Phase::kChunkSize;
        line_.clear();
        break;
      case Phase::kDone:
        break;
    }
    if (phase_ == Phase::kDone && state_ == State::kIncomplete) state_ = State::kComplete;
    if (pos == before && state_ == State::kIncomplete) break;  // nothing taken: wait for more
  }
  // A request without a body completes at its blank line, even with no bytes after it.
  if (phase_ == Phase::kDone && state_ == State::kIncomplete) state_ = State::kComplete;
  return pos;
}

}  // namespace mt::server
