// Reading and validating `tokenizer.ggml.*` into a Vocab.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <variant>

#include "core/log.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace mt::tok {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// Token texts that end generation whatever their declared type (llama.cpp recognises end
// of turn, end of message and fill-in-the-middle padding/repo/file separators by text,
// and makes them control tokens).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<reponame>",
    "<|file_sep|>",
};

Status bad(std::string_view key, const std::string& what) {
  return data_loss("metadata key '" + std::string(key) + "': " + what);
}

Status read_tokens(const gguf::GgufFile& file, Vocab& v) {
  MT_ASSIGN_OR_RETURN(const gguf::Array* tokens, file.get_array(kTokensKey));
  if (tokens->elem_type != gguf::ValueType::kString) {
    return bad(kTokensKey, std::string("is an array of ") + gguf::value_type_name(tokens->elem_type) +
                               ", expected strings");
  }
  if (tokens->count == 0) return bad(kTokensKey, "the vocabulary is empty");
  if (tokens->count > static_cast<uint64_t>(INT32_MAX)) return bad(kTokensKey, "too many tokens");
  const size_t n = tokens->count;
  v.text.assign(tokens->strings.begin(), tokens->strings.end());
  v.score.assign(n, 0.0f);
  v.type.assign(n, TokenType::kNormal);
  v.eog.assign(n, false);
  v.rstrip.assign(n, false);
  v.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.text[i].empty()) continue;
    auto [it, inserted] = v.id_of.emplace(v.text[i], static_cast<int32_t>(i));
    if (!inserted) {
      return bad(kTokensKey, "tokens " + std::to_string(it->second) + " and " + std::to_string(i) +
                                 " have the same text");
    }
  }
  return {};
}

// An optional per-token array: absent leaves the defaults; else at least one per token.
StatusOr<const gguf::Array*> per_token_array(const gguf::GgufFile& file, std::string_view key, const Vocab& v,
                                             bool floats, const char* what) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return static_cast<const gguf::Array*>(nullptr);
  const gguf::Array* a = value->array();
  const bool type_ok = a != nullptr && (floats ? (a->elem_type == gguf::ValueType::kF32 ||
                                                  a->elem_type == gguf::ValueType::kF64)
                                               : gguf::is_integer(a->elem_type));
  if (!type_ok) return bad(key, std::string("expected an array of ") + (floats ? "f32" : "integers"));
  if (a->count < v.n_tokens()) {
    return bad(key, std::to_string(a->count) + " " + what + " for " + std::to_string(v.n_tokens()) + " tokens");
  }
  return a;
}

Status read_scores_and_types(const gguf::GgufFile& file, Vocab& v) {
  MT_ASSIGN_OR_RETURN(const gguf::Array* scores, per_token_array(file, kScoresKey, v, true, "scores"));
  MT_ASSIGN_OR_RETURN(const gguf::Array* types, per_token_array(file, kTypesKey, v, false, "types"));
  for (uint32_t i = 0; i < v.n_tokens(); ++i) {
    if (scores != nullptr) v.score[i] = static_cast<float>(scores->float_at(i));
    if (types != nullptr) {
      const int64_t t = types->int_at(i);
      v.type[i] = (t >= 1 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }
  return {};
}

Status read_merges(const gguf::GgufFile& file, Vocab& v) {
  MT_ASSIGN_OR_RETURN(const gguf::Array* merges, file.get_array(kMergesKey));
  if (merges->elem_type != gguf::ValueType::kString) return bad(kMergesKey, "expected an array of strings");
  if (merges->count > static_cast<uint64_t>(INT32_MAX)) return bad(kMergesKey, "too many merges");
  v.merges.reserve(merges->count);
  std::string joined;
  for (size_t i = 0; i < merges->count; ++i) {
    const std::string_view m = merges->strings[i];
    auto where = [&] { return "merge " + std::to_string(i) + " '" + std::string(m) + "'"; };
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos) return bad(kMergesKey, where() + " is not 'left right'");
    const std::string_view left = m.substr(0, space);
    const std::string_view right = m.substr(space + 1);
    joined.assign(left).append(right);
    const int32_t l = v.find(left);
    const int32_t r = v.find(right);
    const int32_t result = v.find(joined);
    if (l < 0 || r < 0) {
      return bad(kMergesKey,
                 where() + " references '" + std::string(l < 0 ? left : right) + "', which is not a token");
    }
    if (result < 0) return bad(kMergesKey, where() + " merges into '" + joined + "', which is not a token");
    // A repeated pair keeps its first (lowest) rank.
    v.merges.emplace((static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r),
                     MergeInfo{static_cast<int32_t>(i), result});
  }
  return {};
}

// An id key: absent keeps `*id`; an id outside the vocab is ignored with a warning, as
// llama.cpp does (real files carry e.g. a padding id equal to the vocab size).
Status read_id(const gguf::GgufFile& file, std::string_view key, const Vocab& v, int32_t* id) {
  if (file.find(key) == nullptr) return {};
  MT_ASSIGN_OR_RETURN(uint32_t value, file.get_u32(key));
  if (value >= v.n_tokens()) {
    log_warn("tokenizer: " + std::string(key) + " = " + std::to_string(value) + " is outside the vocabulary of " +
             std::to_string(v.n_tokens()) + " tokens; ignored");
    return {};
  }
  *id = static_cast<int32_t>(value);
  return {};
}

Status read_special_ids(const gguf::GgufFile& file, Vocab& v) {
  if (v.model == VocabModel::kSpm) {  // SentencePiece's conventional ids
    const auto fits = [&](int32_t id) { return id < static_cast<int32_t>(v.n_tokens()) ? id : -1; };
    v.unk = fits(0);
    v.bos = fits(1);
    v.eos = fits(2);
  }
  const std::pair<std::string_view, int32_t*> keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},       {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},       {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},   {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},   {"tokenizer.ggml.mask_token_id", &v.mask},
  };
  for (const auto& [key, id] : keys) MT_RETURN_IF_ERROR(read_id(file, key, v, id));

  MT_ASSIGN_OR_RETURN(v.add_bos, file.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos));
  MT_ASSIGN_OR_RETURN(v.add_eos, file.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos));
  MT_ASSIGN_OR_RETURN(v.add_space_prefix,
                      file.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (v.add_bos && v.bos < 0) {
    return data_loss("tokenizer: add_bos_token is set but the vocab has no bos_token_id");
  }
  if (v.add_eos && v.eos < 0) {
    return data_loss("tokenizer: add_eos_token is set but the vocab has no eos_token_id");
  }
  return {};
}

void mark_end_of_generation(Vocab& v) {
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = v.find(text);
    if (id < 0) continue;
    v.eog[id] = true;
    v.type[id] = TokenType::kControl;
  }
  for (int32_t id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) v.eog[id] = true;
  }
}

void index_special_tokens(Vocab& v) {
  for (uint32_t id = 0; id < v.n_tokens(); ++id) {
    const TokenType t = v.type[id];
    const bool special = t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
    if (special && !v.text[id].empty()) v.special_by_length.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(v.special_by_length.begin(), v.special_by_length.end(),
                   [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });
}

// llama.cpp's per-model token attribute: in Phi-3 vocabs (recognised by general.name) the
// special tokens other than <unk>, <s> and <|endoftext|> swallow the whitespace after them.
void mark_rstrip_tokens(const gguf::GgufFile& file, Vocab& v) {
  const gguf::Value* value = file.find("general.name");
  const auto* name = value == nullptr ? nullptr : std::get_if<std::string_view>(&value->data);
  if (name == nullptr) return;
  std::string lower(*name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) return;
  for (int32_t id : v.special_by_length) v.rstrip[id] = true;
  if (const int32_t id = v.find("</s>"); id >= 0) v.rstrip[id] = true;
  for (std::string_view keep : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (const int32_t id = v.find(keep); id >= 0) v.rstrip[id] = false;
  }
}

void index_byte_tokens(Vocab& v) {
  for (uint32_t b = 0; b < 256; ++b) {
    int32_t id = -1;
    if (v.model == VocabModel::kBpe) {
      std::string ch;
      append_utf8(ch, byte_to_codepoint(static_cast<uint8_t>(b)));
      id = v.find(ch);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      id = v.find(hex);
      if (id < 0) id = v.find(std::string(1, static_cast<char>(b)));
    }
    v.byte_token[b] = id;
  }
}

}  // namespace

int Vocab::byte_value(int32_t id) const {
  const std::string& t = text[id];
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]);
  const int lo = hex(t[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

StatusOr<std::shared_ptr<const Vocab>> load_vocab(const gguf::GgufFile& file) {
  auto v = std::make_shared<Vocab>();
  MT_ASSIGN_OR_RETURN(std::string_view model, file.get_string(kModelKey));
  if (model == "llama") {
    v->model = VocabModel::kSpm;
    v->add_space_prefix = true;
    v->add_bos = true;
  } else if (model == "gpt2") {
    v->model = VocabModel::kBpe;
    std::string_view pre;
    if (file.find(kPreKey) != nullptr) {
      MT_ASSIGN_OR_RETURN(pre, file.get_string(kPreKey));
    }
    MT_ASSIGN_OR_RETURN(v->pre, pre_type_from_name(pre));
    if (v->pre == PreType::kLlama3) {  // llama.cpp's defaults for this pre-tokenizer
      v->ignore_merges = true;
      v->add_bos = true;
    }
  } else {
    return unimplemented("tokenizer.ggml.model '" + std::string(model) +
                         "' is not supported (supported: llama = SentencePiece, gpt2 = byte-level BPE)");
  }
  MT_RETURN_IF_ERROR(read_tokens(file, *v));
  MT_RETURN_IF_ERROR(read_scores_and_types(file, *v));
  if (v->model == VocabModel::kBpe) MT_RETURN_IF_ERROR(read_merges(file, *v));
  MT_RETURN_IF_ERROR(read_special_ids(file, *v));
  mark_end_of_generation(*v);
  index_special_tokens(*v);
  mark_rstrip_tokens(file, *v);
  index_byte_tokens(*v);
  return std::shared_ptr<const Vocab>(std::move(v));
}

}  // namespace mt::tok
