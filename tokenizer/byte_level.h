// GPT-2's byte-level alphabet: every byte value stands for one printable code point, so a
// byte-level BPE vocabulary stores any byte string as ordinary (UTF-8) text.
//
// Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for the code point of the same value;
// the other 68 bytes (controls, space, DEL, 0x80..0xA0, soft hyphen) take U+0100 onwards
// in increasing byte order (space -> U+0120 'Ġ', newline -> U+010A 'Ċ'). The mapping is a
// bijection between the 256 bytes and those 256 code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mt::tok {

uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 when it is outside the alphabet.
int codepoint_to_byte(uint32_t cp);

// Bytes -> the UTF-8 text of their code points ("a b" -> "aĠb").
std::string byte_level_encode(std::string_view bytes);
// A vocabulary token's text -> the bytes it stands for. A character outside the alphabet
// (or invalid UTF-8) is kept as it is, so nothing is lost.
std::string byte_level_decode(std::string_view text);

}  // namespace mt::tok
