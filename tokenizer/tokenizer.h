// Tokenizer: text <-> token ids for a GGUF's vocabulary, compatible with llama.cpp.
//
// Two models, chosen by `tokenizer.ggml.model`: `llama` (SentencePiece: score-ordered
// merges of adjacent symbols, byte fallback through <0xXX> tokens, spaces escaped as
// U+2581, a space put before the text) and `gpt2` (byte-level BPE: the pre-tokenizer of
// `tokenizer.ggml.pre` splits the text into words, each word's bytes are merged by rank).
// encode: special tokens are cut out first (tokenizer/special_split.h), then each raw
// fragment is encoded on its own; BOS/EOS are added when add_special and the vocab says so
// (`add_bos_token` / `add_eos_token`, else llama.cpp's default for the model/pre-type).
// Invalid UTF-8 is encoded byte for byte (llama.cpp replaces it by U+FFFD first).
//
// decode is the concatenation of token_to_piece, where the SentencePiece space prefix is
// removed again from the first piece that has text (llama.cpp removes it from the first
// token, BOS included); no clean-up of spaces around punctuation is done. So
// decode(encode(s, false, false)) == s for any bytes s, except: bytes the vocab cannot
// spell (gpt-neox has no token for the bytes that never occur in UTF-8, C0 C1 F5..FF;
// the DeepSeek vocabs made their characters user-defined tokens, which decode as text),
// U+2581 in SentencePiece input (read as an escaped space), and SentencePiece input with
// special-token text (a space is put after each special token, as llama.cpp does).
// Token ids given to token_to_piece/decode must be valid (check untrusted ones with valid()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/reader.h"
#include "tokenizer/vocab.h"

namespace mt {

class Tokenizer {
 public:
  // Reads `tokenizer.ggml.*`. Errors: missing or mistyped keys, an unknown model or
  // pre-tokenizer, duplicate token texts, merges naming unknown tokens, add_bos/add_eos
  // without the id to add.
  static StatusOr<Tokenizer> from_gguf(const gguf::GgufFile& file);

  // add_special: prepend BOS / append EOS as the vocab asks. parse_special: text equal
  // to a control token becomes that token (user-defined tokens are always matched).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for. Control and unknown tokens give "" unless render_special
  // (then their text); user-defined tokens give their text.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  uint32_t n_vocab() const { return vocab_->n_tokens(); }
  bool valid(int32_t id) const { return id >= 0 && static_cast<uint32_t>(id) < n_vocab(); }
  const std::string& token_text(int32_t id) const;  // as stored in the vocab
  TokenType token_type(int32_t id) const;
  int32_t find_token(std::string_view text) const { return vocab_->find(text); }  // -1 if none

  int32_t bos() const { return vocab_->bos; }  // -1 when the vocab has none
  int32_t eos() const { return vocab_->eos; }
  int32_t eot() const { return vocab_->eot; }
  int32_t unk() const { return vocab_->unk; }
  int32_t pad() const { return vocab_->pad; }
  bool add_bos() const { return vocab_->add_bos; }
  bool add_eos() const { return vocab_->add_eos; }
  bool add_space_prefix() const { return vocab_->add_space_prefix; }
  bool is_eog(int32_t id) const { return valid(id) && vocab_->eog[id]; }  // end of generation

  bool is_spm() const { return vocab_->model == tok::VocabModel::kSpm; }
  const char* model_name() const { return is_spm() ? "llama" : "gpt2"; }
  const char* pre_name() const { return tok::pre_type_name(vocab_->pre); }

  // True when decode removes one leading space from the first piece with text.
  bool strips_space_prefix() const { return is_spm() && vocab_->add_space_prefix; }

 private:
  explicit Tokenizer(std::shared_ptr<const tok::Vocab> vocab) : vocab_(std::move(vocab)) {}
  std::shared_ptr<const tok::Vocab> vocab_;  // immutable, shared by copies
};

}  // namespace mt
