// StreamDecoder: detokenization one token at a time, for streaming generated text.
//
// Invariant: every string push() returns ends on a UTF-8 character boundary — a
// multi-byte character split across tokens (byte-fallback tokens, byte-level BPE pieces of
// an emoji) is held back until its last byte arrives. The concatenation of everything
// push() and flush() return equals Tokenizer::decode of the same ids. Bytes that can never
// complete a character (invalid UTF-8 in the pieces) are passed through as soon as that
// is certain, and flush() returns whatever is still held.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace mt {

class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(&tokenizer), render_special_(render_special) {}

  std::string push(int32_t id);
  std::string flush();
  void reset();  // start a new sequence (the space-prefix rule applies again)

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  bool strip_pending_ = true;  // the first piece with text has not been seen yet
  std::string held_;           // an incomplete UTF-8 sequence
};

}  // namespace mt
