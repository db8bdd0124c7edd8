#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace mt {
namespace {

// Length of the longest prefix of s that does not end inside a character that the next
// bytes could still complete.
size_t complete_prefix(const std::string& s) {
  size_t i = s.size();
  size_t continuation = 0;
  while (i > 0 && continuation < 3 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return s.size();
  const uint32_t need = tok::utf8_lead_len(static_cast<uint8_t>(s[i - 1]));
  return need > continuation + 1 ? i - 1 : s.size();
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tokenizer_->token_to_piece(id, render_special_);
  if (strip_pending_ && !piece.empty()) {
    if (tokenizer_->strips_space_prefix() && piece[0] == ' ') piece.erase(0, 1);
    strip_pending_ = false;
  }
  held_ += piece;
  const size_t n = complete_prefix(held_);
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

void StreamDecoder::reset() {
  held_.clear();
  strip_pending_ = true;
}

}  // namespace mt
