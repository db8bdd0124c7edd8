#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace mt::tok {
namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// ASCII is looked up directly; everything else by binary search in the tables.
const std::array<UCat, 128>& ascii_categories() {
  static const std::array<UCat, 128> table = [] {
    std::array<UCat, 128> t{};
    for (size_t i = 0; i < kCategoryRangeCount && kCategoryRanges[i].first < 128; ++i) {
      const CategoryRange& r = kCategoryRanges[i];
      for (uint32_t cp = r.first; cp <= r.last && cp < 128; ++cp) t[cp] = r.cat;
    }
    return t;
  }();
  return table;
}

}  // namespace

DecodedChar decode_utf8(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {b0, 1};
  uint32_t len = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
    min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
    min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
    min = 0x10000;
  } else {
    return {};
  }
  if (s.size() - pos < len) return {};
  for (uint32_t i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if (!is_continuation(b)) return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, len};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

UCat category(uint32_t cp) {
  if (cp < 128) return ascii_categories()[cp];
  if (cp == kInvalidCodepoint) return UCat::kOther;
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it =
      std::upper_bound(kCategoryRanges, end, cp, [](uint32_t v, const CategoryRange& r) { return v < r.first; });
  if (it == kCategoryRanges) return UCat::kUnassigned;
  --it;
  return cp <= it->last ? it->cat : UCat::kUnassigned;
}

bool is_whitespace(uint32_t cp) {
  if (cp < 128) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  for (size_t i = 0; i < kWhiteSpaceRangeCount; ++i) {
    if (cp < kWhiteSpaceRanges[i].first) return false;
    if (cp <= kWhiteSpaceRanges[i].last) return true;
  }
  return false;
}

}  // namespace mt::tok
