#include "tokenizer/tokenizer.h"

#include "core/check.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm.h"

namespace mt {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0;;) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(s.substr(pos));
      return out;
    }
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  MT_ASSIGN_OR_RETURN(std::shared_ptr<const tok::Vocab> vocab, tok::load_vocab(file));
  return Tokenizer(std::move(vocab));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const tok::Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && v.add_bos) out.push_back(v.bos);
  const std::vector<tok::Fragment> frags = tok::split_special(v, text, parse_special);
  if (v.model == tok::VocabModel::kSpm) {
    bool after_special = true;  // the text start counts as following a special token
    for (const tok::Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      const std::string raw = (v.add_space_prefix && after_special) ? " " + std::string(f.text) : std::string(f.text);
      tok::spm_encode(v, replace_all(raw, " ", kEscapedSpace), out);
      after_special = false;
    }
  } else {
    tok::BpeScratch scratch;
    for (const tok::Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      for (std::string_view word : tok::pretokenize(v.pre, f.text)) tok::bpe_encode_word(v, word, scratch, out);
    }
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  MT_CHECK_MSG(valid(id), "token id outside the vocabulary");
  const tok::Vocab& v = *vocab_;
  const std::string& text = v.text[id];
  switch (v.type[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return render_special ? text : std::string();
    case TokenType::kUserDefined:
      return text;
    case TokenType::kNormal:
      return v.model == tok::VocabModel::kSpm ? replace_all(text, kEscapedSpace, " ") : tok::byte_level_decode(text);
    case TokenType::kByte: {
      const int b = v.byte_value(id);
      return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
    }
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return {};
  }
  return {};
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool strip = strips_space_prefix();
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (strip && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  MT_CHECK_MSG(valid(id), "token id outside the vocabulary");
  return vocab_->text[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  MT_CHECK_MSG(valid(id), "token id outside the vocabulary");
  return vocab_->type[id];
}

}  // namespace mt
