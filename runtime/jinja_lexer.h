// Tokens of a Jinja template, lexed with the settings transformers renders chat templates
// with: trim_blocks (the newline right after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs between the start of a line and a block or comment tag
// are dropped), keep_trailing_newline off (one newline at the very end is dropped), and
// the tag markers "-" (strip all whitespace on that side) and "+" (keep it).
//
// All whitespace control happens here: a kText token holds exactly the bytes to output.
// Comments vanish; the body of `{% raw %}...{% endraw %}` becomes one kText token. Inside
// a tag, tokens are names, literals and operators; brackets are balanced so that `}}`
// inside a dict literal does not end a `{{ }}` tag. Newlines are normalised to "\n".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mt::jinja {

struct SourcePos {
  int line = 0;    // 1-based
  int column = 0;  // 1-based, in bytes
};

// "chat template 3:14: <message>", the form of every error of the interpreter.
Status error_at(StatusCode code, SourcePos pos, std::string_view message);
inline Status syntax_error(SourcePos pos, std::string_view message) {
  return error_at(StatusCode::kInvalidArgument, pos, message);
}

enum class TokenKind : uint8_t {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "==", "(", ...
  kEnd,       // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  SourcePos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

// Errors: unclosed tags, comments and strings, characters that begin no token.
StatusOr<std::vector<Token>> tokenize(std::string_view source);

}  // namespace mt::jinja
