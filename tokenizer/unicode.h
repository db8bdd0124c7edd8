// Unicode for the tokenizers: UTF-8 that never fails, and the per-code-point facts the
// pre-tokenizer rules test (general-category group, White_Space).
//
// Invariant: decoding never rejects input. A byte that does not start a valid UTF-8
// sequence decodes as one code unit of its own (kInvalidCodepoint, category kOther), so
// every byte of the text belongs to exactly one decoded unit and the original bytes can
// always be recovered from the offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/unicode_tables.h"

namespace mt::tok {

constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

struct DecodedChar {
  uint32_t cp = kInvalidCodepoint;  // kInvalidCodepoint for a byte outside valid UTF-8
  uint32_t len = 1;                 // bytes consumed, 1..4
};

// Decodes the sequence at s[pos] (pos < s.size()), rejecting overlong forms, surrogates
// and values above U+10FFFF.
DecodedChar decode_utf8(std::string_view s, size_t pos);

// The length of the sequence a lead byte announces (1 for ASCII, continuation and
// invalid lead bytes).
inline uint32_t utf8_lead_len(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return lead < 0xF8 ? 4 : 1;
}

void append_utf8(std::string& out, uint32_t cp);

UCat category(uint32_t cp);        // kOther for kInvalidCodepoint
bool is_whitespace(uint32_t cp);   // White_Space

}  // namespace mt::tok
