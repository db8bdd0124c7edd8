#include "synth/vocab.h"

#include <string>
#include <vector>

#include "core/log.h"
#include "gguf/reader.h"

namespace mt::synth {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the others to 256+.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    tokens[b] = utf8(printable ? b : next++);
  }
  return tokens;
}

constexpr int kTokenNormal = 1, kTokenControl = 3, kTokenUnused = 5;

StatusOr<uint32_t> builtin_vocab(const SynthConfig& config, gguf::GgufWriter& w) {
  std::vector<std::string> tokens = byte_tokens();
  std::vector<int32_t> types(tokens.size(), kTokenNormal);
  // A few English merges; each result is a token too ("\xC4\xA0" is GPT-2's space).
  const std::string sp = "\xC4\xA0";
  const std::vector<std::pair<std::string, std::string>> merges = {
      {sp, "t"}, {"h", "e"}, {"i", "n"}, {sp, "a"}, {"e", "r"}, {"o", "n"}, {sp + "t", "he"},
      {"r", "e"}, {"a", "n"}, {sp, "s"}, {"o", "r"}, {"e", "n"}, {"i", "s"}, {sp, "w"}};
  std::vector<std::string> merge_strings;
  for (const auto& [a, b] : merges) {
    merge_strings.push_back(a + " " + b);
    tokens.push_back(a + b);
    types.push_back(kTokenNormal);
  }
  const uint32_t eos = static_cast<uint32_t>(tokens.size());
  tokens.emplace_back("<|endoftext|>");
  types.push_back(kTokenControl);
  for (uint32_t i = 0; tokens.size() < config.n_vocab; ++i) {
    tokens.push_back("<|unused_" + std::to_string(i) + "|>");
    types.push_back(kTokenUnused);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", merge_strings);
  w.set_u32("tokenizer.ggml.bos_token_id", eos);
  w.set_u32("tokenizer.ggml.eos_token_id", eos);
  w.set_u32("tokenizer.ggml.padding_token_id", eos);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  return static_cast<uint32_t>(tokens.size());
}

}  // namespace

StatusOr<uint32_t> write_vocab(const SynthConfig& config, gguf::GgufWriter& w) {
  if (config.vocab_path.empty()) return builtin_vocab(config, w);
  MT_ASSIGN_OR_RETURN(gguf::GgufFile vocab, gguf::GgufFile::open(config.vocab_path));
  MT_ASSIGN_OR_RETURN(const gguf::Array* tokens, vocab.get_array("tokenizer.ggml.tokens"));
  if (tokens->elem_type != gguf::ValueType::kString || tokens->count == 0 || tokens->count > (1u << 24)) {
    return invalid_argument("vocab '" + config.vocab_path + "': tokenizer.ggml.tokens is not a usable string array");
  }
  for (const gguf::KeyValue& kv : vocab.metadata()) {
    if (kv.key.substr(0, 10) == "tokenizer.") w.set(std::string(kv.key), kv.value);
  }
  const auto n = static_cast<uint32_t>(tokens->count);
  if (config.n_vocab != 0 && config.n_vocab != n) {
    log_info("vocab '" + config.vocab_path + "' has " + std::to_string(n) + " tokens; using that instead of " +
             std::to_string(config.n_vocab));
  }
  return n;
}

}  // namespace mt::synth
