// Pre-tokenizers: the regex split a byte-level BPE vocabulary applies to text before
// merging (`tokenizer.ggml.pre`), written as hand-made matchers rather than a regex engine.
//
// A pre-type is a list of passes run in order, as llama.cpp runs its list of regexes: a
// pass searches each piece left by the previous pass for leftmost matches, and both the
// matches and the text between them become the pieces of the next pass (the first pass
// sees the whole text). The matchers follow the regexes exactly: leftmost-first
// alternation, greedy quantifiers, lookahead and `$` bounded by the piece being searched,
// \p{..} by Unicode general category, \s by White_Space.
//
// Invariant: the pieces tile the text — concatenated, they give it back byte for byte
// (invalid UTF-8 included; an invalid byte is a character of category "other").
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace mt::tok {

enum class PreType {
  kDefault,        // llama.cpp's fallback split (also a BPE vocab with no `pre` key)
  kGpt2,           // gpt-2, olmo
  kLlama3,         // llama-bpe, llama3, llama-v3: digits in runs of up to 3
  kQwen2,          // qwen2, deepseek-r1-qwen: single digits
  kQwen35,         // qwen35: as qwen2, with combining marks (\p{M}) kept in words
  kDeepseekLlm,    // deepseek-llm: six passes with explicit letter/punctuation ranges
  kDeepseekCoder,  // deepseek-coder: five passes
};

// `tokenizer.ggml.pre` -> pre-type; "" means the key is absent (default split).
StatusOr<PreType> pre_type_from_name(std::string_view name);
const char* pre_type_name(PreType type);

// The words of `text`, as views into it, in order.
std::vector<std::string_view> pretokenize(PreType type, std::string_view text);

}  // namespace mt::tok
