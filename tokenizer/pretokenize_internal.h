// Shared by the pre-tokenizer driver and its rules: the decoded text a pass searches and
// the shape of one pass.
//
// A pass is a search: given a piece [from, end) of code point indices it finds the leftmost
// match starting at or after `from` and ending at or before `end` (lookahead never looks
// past `end`), or reports none.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace mt::tok {

// The text as code points; info[i] = category (low 4 bits) | kWhiteSpaceBit.
struct DecodedText {
  static constexpr uint8_t kWhiteSpaceBit = 0x10;
  std::vector<uint32_t> cp;
  std::vector<uint8_t> info;
  std::vector<uint32_t> offset;  // byte offset of code point i; offset[size] = bytes

  uint32_t size() const { return static_cast<uint32_t>(cp.size()); }
  UCat cat(uint32_t i) const { return static_cast<UCat>(info[i] & 0x0F); }
  bool space(uint32_t i) const { return (info[i] & kWhiteSpaceBit) != 0; }
  bool letter(uint32_t i) const { return cat(i) == UCat::kLetter; }
  bool number(uint32_t i) const { return cat(i) == UCat::kNumber; }
};

DecodedText decode_text(std::string_view text);

struct Match {
  uint32_t begin = 0;
  uint32_t end = 0;
};
using PassFn = bool (*)(const DecodedText& t, uint32_t from, uint32_t end, Match* m);

// The passes of a pre-type, in order (pretokenize_rules.cpp).
std::span<const PassFn> passes_for(PreType type);

}  // namespace mt::tok
