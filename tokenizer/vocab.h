// Vocab: a GGUF's tokenizer metadata (`tokenizer.ggml.*`), read once, validated and then
// immutable — token texts, types and scores, the special ids and flags, the merge ranks of
// a byte-level BPE and the byte-fallback tokens.
//
// Invariants after load_vocab() succeeds: every text maps back to its id (texts are
// unique; an empty text is not looked up); every special id is -1 or a valid id; a merge
// is (left id, right id) -> (rank, id of the concatenation), all three tokens existing;
// add_bos / add_eos imply the id they add exists. A Vocab never moves (it is built in place
// behind a shared_ptr), so the string_view keys of its maps stay valid.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gguf/reader.h"
#include "tokenizer/pretokenize.h"

namespace mt {

// `tokenizer.ggml.token_type`; values outside 1..6 read as kUndefined.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

}  // namespace mt

namespace mt::tok {

enum class VocabModel {
  kSpm,  // tokenizer.ggml.model = llama: SentencePiece, score-based merges, byte fallback
  kBpe,  // tokenizer.ggml.model = gpt2: byte-level BPE, merges by rank
};

struct MergeInfo {
  int32_t rank = 0;    // index in tokenizer.ggml.merges: lower merges first
  int32_t result = 0;  // the token the pair becomes
};

struct Vocab {
  Vocab() = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabModel model = VocabModel::kBpe;
  PreType pre = PreType::kDefault;  // BPE only

  std::vector<std::string> text;  // (n_tokens)
  std::vector<float> score;       // (n_tokens), 0 when the file has no scores
  std::vector<TokenType> type;    // (n_tokens)
  std::vector<bool> eog;          // (n_tokens) ends generation
  std::vector<bool> rstrip;       // (n_tokens) whitespace after the token is dropped when it is cut out of text
  std::unordered_map<std::string_view, int32_t> id_of;  // text -> id

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: a space is put before the text (and removed by decode)
  bool ignore_merges = false;     // BPE: a word that is a token is taken whole (llama3)

  // Control, user-defined and unknown tokens, longest text first (ties: lower id first):
  // the order in which text is searched for them.
  std::vector<int32_t> special_by_length;

  // Byte b as a token: BPE the token of b's byte-level character, SPM <0xXX> (else the
  // one-byte text); -1 where the vocab has none.
  std::array<int32_t, 256> byte_token{};

  std::unordered_map<uint64_t, MergeInfo> merges;  // BPE: key = left << 32 | right

  uint32_t n_tokens() const { return static_cast<uint32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = id_of.find(s);
    return it == id_of.end() ? -1 : it->second;
  }
  const MergeInfo* find_merge(int32_t left, int32_t right) const {
    auto it = merges.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
    return it == merges.end() ? nullptr : &it->second;
  }
  // The byte a <0xXX> token stands for, or -1.
  int byte_value(int32_t id) const;
};

StatusOr<std::shared_ptr<const Vocab>> load_vocab(const gguf::GgufFile& file);

}  // namespace mt::tok
