#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace mt::tok {
namespace {

bool stands_for_itself(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> to_byte{};  // every mapped code point is below U+0200
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r;
    r.to_byte.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      r.to_cp[b] = stands_for_itself(b) ? b : next++;
      r.to_byte[r.to_cp[b]] = static_cast<int16_t>(b);
    }
    return r;
  }();
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const DecodedChar ch = decode_utf8(text, pos);
    const int b = ch.cp == kInvalidCodepoint ? -1 : codepoint_to_byte(ch.cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(pos, ch.len));
    }
    pos += ch.len;
  }
  return out;
}

}  // namespace mt::tok
