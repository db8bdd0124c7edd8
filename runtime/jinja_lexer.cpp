#include "runtime/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/unicode.h"

namespace mt::jinja {

Status error_at(StatusCode code, SourcePos pos, std::string_view message) {
  return {code, "chat template " + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " +
                    std::string(message)};
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines become "\n" and one trailing newline is dropped (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  StatusOr<std::vector<Token>> run() {
    size_t i = 0;
    bool line_starting = true;  // the last tag ended with a newline (or nothing came yet)
    while (i < src_.size()) {
      const size_t start = find_tag(i);
      std::string text = src_.substr(i, start - i);
      if (start == src_.size()) {
        push_text(std::move(text), i);
        break;
      }
      const char type = src_[start + 1];
      size_t after = start + 2;
      const char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : '\0';
      if (sign) ++after;
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && type != '{') {  // lstrip_blocks: block and comment tags only
        const size_t line_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_pos > 0 || line_starting) && text.size() > line_pos &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_pos), text.end(), is_space)) {
          text.resize(line_pos);
        }
      }
      push_text(std::move(text), i);
      if (type == '#') {
        MT_ASSIGN_OR_RETURN(i, skip_comment(start, after));
      } else {
        size_t raw_end = 0;
        if (type == '%' && is_raw_begin(after, raw_end)) {
          MT_ASSIGN_OR_RETURN(i, lex_raw(start, raw_end));
        } else {
          MT_ASSIGN_OR_RETURN(i, lex_tag(type == '%', start, after));
        }
      }
      line_starting = src_[i - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", pos_of(src_.size()), 0, 0});
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    return {static_cast<int>(it - line_starts_.begin()) + 1, static_cast<int>(offset - *it) + 1};
  }

  size_t find_tag(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  void push_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{TokenKind::kText, std::move(text), pos_of(offset), 0, 0});
  }

  size_t skip_space(size_t i) const {
    while (i < src_.size() && is_space(src_[i])) ++i;
    return i;
  }

  // After a block or comment tag: "-" strips all following whitespace, "+" keeps it, and
  // otherwise one newline goes (trim_blocks).
  size_t after_block_end(size_t end, char marker) const {
    if (marker == '-') return skip_space(end);
    if (marker != '+' && end < src_.size() && src_[end] == '\n') return end + 1;
    return end;
  }

  StatusOr<size_t> skip_comment(size_t start, size_t after) const {
    const size_t e = src_.find("#}", after);
    if (e == std::string::npos) return syntax_error(pos_of(start), "unclosed comment");
    const char marker = e > after && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : '\0';
    return after_block_end(e + 2, marker);
  }

  // `{% raw %}`: sets raw_end to the offset just past its "%}" (and the whitespace a "-" strips).
  bool is_raw_begin(size_t after, size_t& raw_end) const {
    size_t k = skip_space(after);
    if (src_.compare(k, 3, "raw") != 0 || (k + 3 < src_.size() && is_name_char(src_[k + 3]))) return false;
    k = skip_space(k + 3);
    const bool minus = k < src_.size() && src_[k] == '-';
    if (minus) ++k;
    if (src_.compare(k, 2, "%}") != 0) return false;
    raw_end = minus ? skip_space(k + 2) : k + 2;
    return true;
  }

  StatusOr<size_t> lex_raw(size_t start, size_t body) {
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 2)) {
      size_t j = k + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
      if (sign) ++j;
      j = skip_space(j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(j + 6);
      const char marker = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
      if (marker) ++j;
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(body, k - body);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      push_text(std::move(text), body);
      return after_block_end(j + 2, marker);
    }
    return syntax_error(pos_of(start), "unclosed {% raw %} block");
  }

  StatusOr<size_t> lex_tag(bool block, size_t start, size_t i) {
    tokens_.push_back(Token{block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", pos_of(start), 0, 0});
    int depth = 0;  // open brackets: end delimiters inside them are operators
    const TokenKind end_kind = block ? TokenKind::kBlockEnd : TokenKind::kVarEnd;
    for (;;) {
      i = skip_space(i);
      if (i >= src_.size()) return syntax_error(pos_of(start), block ? "unclosed {% tag" : "unclosed {{ tag");
      const char c = src_[i];
      if (depth == 0) {
        const char close = block ? '%' : '}';
        const char marker = c == '-' || (c == '+' && block) ? c : '\0';
        const size_t at = marker ? i + 1 : i;
        if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
          tokens_.push_back(Token{end_kind, "", pos_of(i), 0, 0});
          if (block) return after_block_end(at + 2, marker);
          return marker == '-' ? skip_space(at + 2) : at + 2;
        }
      }
      Token t;
      t.pos = pos_of(i);
      if (is_name_start(c)) {
        size_t j = i;
        while (j < src_.size() && is_name_char(src_[j])) ++j;
        t.kind = TokenKind::kName;
        t.text = src_.substr(i, j - i);
        i = j;
      } else if (is_digit(c)) {
        MT_ASSIGN_OR_RETURN(i, lex_number(i, t));
      } else if (c == '\'' || c == '"') {
        MT_ASSIGN_OR_RETURN(i, lex_string(i, t));
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        t.kind = TokenKind::kOperator;
        for (const char* op : kTwo) {
          if (src_.compare(i, 2, op) == 0) t.text = op;
        }
        if (t.text.empty()) {
          if (std::string_view("+-*/%~<>=|,.:()[]{}").find(c) == std::string_view::npos) {
            return syntax_error(t.pos, std::string("unexpected character '") + c + "'");
          }
          t.text = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') ++depth;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        }
        i += t.text.size();
      }
      tokens_.push_back(std::move(t));
    }
  }

  StatusOr<size_t> lex_number(size_t i, Token& t) const {
    // After a "." (x.0.1) only integers are lexed, as Jinja does.
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().text == ".";
    std::string digits;
    auto take_digits = [&](size_t j) {
      while (j < src_.size() && (is_digit(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1])))) {
        if (src_[j] != '_') digits += src_[j];
        ++j;
      }
      return j;
    };
    size_t j = take_digits(i);
    bool is_float = false;
    if (!after_dot && j + 1 < src_.size() && src_[j] == '.' && is_digit(src_[j + 1])) {
      is_float = true;
      digits += '.';
      j = take_digits(j + 1);
    }
    if (!after_dot && j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      std::string exp = "e";
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) exp += src_[k++];
      if (k < src_.size() && is_digit(src_[k])) {
        is_float = true;
        digits += exp;
        j = take_digits(k);
      }
    }
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      errno = 0;
      t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) return syntax_error(t.pos, "integer literal out of range");
    }
    t.text = src_.substr(i, j - i);
    return j;
  }

  // A Python string literal: the escapes of Python's unicode-escape codec.
  StatusOr<size_t> lex_string(size_t i, Token& t) const {
    const char quote = src_[i];
    t.kind = TokenKind::kString;
    auto hex = [&](size_t at, int n, uint32_t& cp) {
      cp = 0;
      for (int k = 0; k < n; ++k) {
        if (at + static_cast<size_t>(k) >= src_.size()) return false;
        const char h = src_[at + static_cast<size_t>(k)];
        const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      return true;
    };
    for (size_t j = i + 1; j < src_.size(); ++j) {
      const char c = src_[j];
      if (c == quote) return j + 1;
      if (c != '\\') {
        t.text += c;
        continue;
      }
      if (++j >= src_.size()) break;
      const char e = src_[j];
      uint32_t cp = 0;
      switch (e) {
        case '\n': break;
        case '\\': t.text += '\\'; break;
        case '\'': t.text += '\''; break;
        case '"': t.text += '"'; break;
        case 'n': t.text += '\n'; break;
        case 't': t.text += '\t'; break;
        case 'r': t.text += '\r'; break;
        case 'a': t.text += '\a'; break;
        case 'b': t.text += '\b'; break;
        case 'f': t.text += '\f'; break;
        case 'v': t.text += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (!hex(j + 1, n, cp) || cp > 0x10FFFF) return syntax_error(pos_of(j - 1), "bad escape in string literal");
          tok::append_utf8(t.text, cp);
          j += static_cast<size_t>(n);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int n = 0;
            for (; n < 3 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++n, ++j) {
              cp = cp * 8 + static_cast<uint32_t>(src_[j] - '0');
            }
            --j;
            tok::append_utf8(t.text, cp);
          } else {
            t.text += '\\';
            t.text += e;
          }
      }
    }
    return syntax_error(t.pos, "unterminated string literal");
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace mt::jinja
