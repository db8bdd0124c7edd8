// Pre-type names and the pass driver; the matchers are in pretokenize_rules.cpp.
#include <string>

#include "core/check.h"
#include "tokenizer/pretokenize_internal.h"

namespace mt::tok {
namespace {

struct PreTypeName {
  std::string_view name;
  PreType type;
};

// The `tokenizer.ggml.pre` values llama.cpp maps to each supported split.
constexpr PreTypeName kPreTypeNames[] = {
    {"default", PreType::kDefault},
    {"gpt-2", PreType::kGpt2},
    {"olmo", PreType::kGpt2},
    {"llama-bpe", PreType::kLlama3},
    {"llama3", PreType::kLlama3},
    {"llama-v3", PreType::kLlama3},
    {"qwen2", PreType::kQwen2},
    {"deepseek-r1-qwen", PreType::kQwen2},
    {"qwen35", PreType::kQwen35},
    {"deepseek-llm", PreType::kDeepseekLlm},
    {"deepseek-coder", PreType::kDeepseekCoder},
};

}  // namespace

StatusOr<PreType> pre_type_from_name(std::string_view name) {
  if (name.empty()) return PreType::kDefault;
  std::string known;
  for (const PreTypeName& n : kPreTypeNames) {
    if (n.name == name) return n.type;
    known += known.empty() ? "" : ", ";
    known += n.name;
  }
  return unimplemented("tokenizer.ggml.pre '" + std::string(name) + "' is not a supported pre-tokenizer (supported: " +
                       known + ")");
}

const char* pre_type_name(PreType type) {
  switch (type) {
    case PreType::kDefault: return "default";
    case PreType::kGpt2: return "gpt-2";
    case PreType::kLlama3: return "llama-bpe";
    case PreType::kQwen2: return "qwen2";
    case PreType::kQwen35: return "qwen35";
    case PreType::kDeepseekLlm: return "deepseek-llm";
    case PreType::kDeepseekCoder: return "deepseek-coder";
  }
  return "?";
}

DecodedText decode_text(std::string_view text) {
  DecodedText t;
  t.cp.reserve(text.size());
  t.info.reserve(text.size());
  t.offset.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const DecodedChar ch = decode_utf8(text, pos);
    t.cp.push_back(ch.cp);
    uint8_t info = static_cast<uint8_t>(category(ch.cp));
    if (is_whitespace(ch.cp)) info |= DecodedText::kWhiteSpaceBit;
    t.info.push_back(info);
    t.offset.push_back(static_cast<uint32_t>(pos));
    pos += ch.len;
  }
  t.offset.push_back(static_cast<uint32_t>(text.size()));
  return t;
}

std::vector<std::string_view> pretokenize(PreType type, std::string_view text) {
  if (text.empty()) return {};
  MT_CHECK(text.size() < UINT32_MAX);
  const DecodedText t = decode_text(text);
  std::vector<Match> pieces{{0, t.size()}};
  std::vector<Match> next;
  for (PassFn pass : passes_for(type)) {
    next.clear();
    for (const Match& piece : pieces) {
      uint32_t pos = piece.begin;
      Match m;
      while (pos < piece.end && pass(t, pos, piece.end, &m)) {
        MT_CHECK(m.begin >= pos && m.end > m.begin && m.end <= piece.end);
        if (m.begin > pos) next.push_back({pos, m.begin});
        next.push_back(m);
        pos = m.end;
      }
      if (pos < piece.end) next.push_back({pos, piece.end});
    }
    pieces.swap(next);
  }
  std::vector<std::string_view> words;
  words.reserve(pieces.size());
  for (const Match& p : pieces) words.push_back(text.substr(t.offset[p.begin], t.offset[p.end] - t.offset[p.begin]));
  return words;
}

}  // namespace mt::tok
