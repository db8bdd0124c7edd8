// Tokenizer behaviour on the real vocabularies: special-token parsing on and off, BOS/EOS
// rules, pieces and decoding, streaming across split characters, exact round trips of
// arbitrary bytes, and the time to encode a long prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

using Ids = std::vector<int32_t>;

// Takes a C string: a std::string temporary argument makes GCC 13+ warn (-Wdangling-reference)
// although the result refers to the static cache.
const Tokenizer& vocab(const char* name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto file = gguf::GgufFile::open(test::testdata(std::string("vocab/ggml-vocab-") + name + ".gguf"));
    MT_CHECK_MSG(file.ok(), file.status().to_string().c_str());
    auto tok = Tokenizer::from_gguf(*file);
    MT_CHECK_MSG(tok.ok(), tok.status().to_string().c_str());
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return it->second;
}

const char* const kAllVocabs[] = {"llama-spm", "phi-3",         "qwen2",          "qwen35", "llama-bpe",
                                  "deepseek-llm", "deepseek-coder", "gpt-2", "gpt-neox"};

TEST(TokenizerSpecial, ControlTokensAreParsedOnlyWhenAsked) {
  const Tokenizer& tok = vocab("qwen2");
  const std::string chat = "<|im_start|>user\nHi<|im_end|>";
  EXPECT_EQ(tok.encode(chat, false, true), (Ids{151644, 872, 198, 13048, 151645}));
  const Ids plain = tok.encode(chat, false, false);
  EXPECT_TRUE(std::none_of(plain.begin(), plain.end(), [](int32_t id) { return id >= 151643; }));
  EXPECT_EQ(tok.decode(plain), chat);
  // Rendering: control tokens are empty unless asked for.
  EXPECT_EQ(tok.decode(tok.encode(chat, false, true)), "user\nHi");
  EXPECT_EQ(tok.decode(tok.encode(chat, false, true), true), chat);
}

TEST(TokenizerSpecial, UserDefinedTokensAreAlwaysMatched) {
  // deepseek-llm lists single characters such as "ø" as user-defined tokens.
  const Tokenizer& ds = vocab("deepseek-llm");
  EXPECT_EQ(ds.token_type(100002), TokenType::kUserDefined);
  EXPECT_EQ(ds.encode("\xC3\xB8", false, false), (Ids{100002}));
  // gpt-neox has user-defined runs of spaces.
  const Tokenizer& neox = vocab("gpt-neox");
  const Ids ids = neox.encode("a  b", false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(neox.token_type(ids[1]), TokenType::kUserDefined);
  EXPECT_EQ(neox.decode(ids), "a  b");
}

TEST(TokenizerSpecial, SpmPutsASpaceAfterEverySpecialToken) {
  const Tokenizer& tok = vocab("llama-spm");
  EXPECT_EQ(tok.encode("Hello", false, false), (Ids{15043}));        // "▁Hello"
  EXPECT_EQ(tok.encode("<s>Hello", false, true), (Ids{1, 15043}));   // special, then "▁Hello"
  EXPECT_EQ(tok.encode("<s>", false, false), (Ids{529, 29879, 29958}));
}

TEST(TokenizerSpecial, Phi3SpecialTokensSwallowTheWhitespaceAfterThem) {
  const Tokenizer& tok = vocab("phi-3");
  EXPECT_EQ(tok.encode("<|user|>\nHi<|end|>\n<|assistant|>", true, true), (Ids{1, 32010, 6324, 32007, 32001}));
}

TEST(TokenizerBosEos, PerVocabDefaultsAndMetadata) {
  EXPECT_EQ(vocab("llama-spm").encode("Hello", true, false), (Ids{1, 15043}));
  EXPECT_EQ(vocab("llama-spm").encode("", true, false), (Ids{1}));
  EXPECT_EQ(vocab("llama-spm").encode("", false, false), Ids{});
  // llama-bpe has no add_bos_token key: the llama3 pre-tokenizer's default adds BOS.
  EXPECT_TRUE(vocab("llama-bpe").add_bos());
  EXPECT_EQ(vocab("llama-bpe").encode("Hello", true, false), (Ids{128000, 9906}));
  EXPECT_EQ(vocab("deepseek-llm").encode("Hello", true, false).front(), 100000);
  EXPECT_EQ(vocab("qwen2").encode("Hello", true, false), (Ids{9707}));
  EXPECT_EQ(vocab("gpt-2").encode("Hello", true, false), (Ids{15496}));
  for (const char* name : kAllVocabs) EXPECT_FALSE(vocab(name).add_eos()) << name;
}

TEST(TokenizerBosEos, EndOfGeneration) {
  const Tokenizer& qwen = vocab("qwen2");
  EXPECT_TRUE(qwen.is_eog(151643));   // eos, <|endoftext|>
  EXPECT_TRUE(qwen.is_eog(151645));   // <|im_end|>, by its text
  EXPECT_FALSE(qwen.is_eog(151644));  // <|im_start|>
  EXPECT_FALSE(qwen.is_eog(9707));
  EXPECT_FALSE(qwen.is_eog(-1));
  const Tokenizer& llama3 = vocab("llama-bpe");
  EXPECT_TRUE(llama3.is_eog(128001));  // <|end_of_text|>
  EXPECT_TRUE(llama3.is_eog(128009));  // <|eot_id|>
  EXPECT_FALSE(llama3.is_eog(128000));
  EXPECT_TRUE(vocab("phi-3").is_eog(32007));  // <|end|>
}

TEST(TokenizerDecode, Pieces) {
  const Tokenizer& spm = vocab("llama-spm");
  EXPECT_EQ(spm.token_to_piece(15043), " Hello");
  EXPECT_EQ(spm.token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(spm.token_to_piece(1), "");
  EXPECT_EQ(spm.token_to_piece(1, true), "<s>");
  EXPECT_EQ(spm.token_to_piece(0), "");
  EXPECT_EQ(spm.token_to_piece(0, true), "<unk>");
  EXPECT_EQ(spm.decode(Ids{1, 15043, 3186}), "Hello world");  // the prefix space goes with BOS skipped
  EXPECT_EQ(spm.decode(Ids{15043, 15043}), "Hello Hello");
  const Tokenizer& bpe = vocab("qwen2");
  EXPECT_EQ(bpe.token_to_piece(220), " ");
  EXPECT_EQ(bpe.token_to_piece(198), "\n");
  EXPECT_EQ(bpe.token_to_piece(21927), " Hello");
  EXPECT_EQ(bpe.decode(Ids{21927, 1879}), " Hello world");  // BPE keeps a leading space
}

TEST(TokenizerStream, HoldsBackSplitCharacters) {
  const Tokenizer& tok = vocab("llama-spm");
  StreamDecoder stream(tok);
  // "▁" then the four byte-fallback tokens of 😁 (F0 9F 98 81).
  const Ids ids = {29871, 243, 162, 155, 132, 15043};
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", "", "\xF0\x9F\x98\x81", " Hello"}));
  EXPECT_EQ(stream.flush(), "");
  EXPECT_EQ(tok.decode(ids), "\xF0\x9F\x98\x81 Hello");

  stream.reset();
  EXPECT_EQ(stream.push(243), "");     // F0: a four-byte character begins
  EXPECT_EQ(stream.flush(), "\xF0");  // flush gives whatever is held
  EXPECT_EQ(stream.push(131), "\x80");  // a lone continuation byte can never complete
  EXPECT_EQ(stream.push(243), "");
  EXPECT_EQ(stream.push(15043), "\xF0 Hello");  // the character was broken: passed through
}

TEST(TokenizerStream, ByteLevelEmojiSplitAcrossTokens) {
  const Tokenizer& tok = vocab("qwen2");
  const std::string text = " this is \xF0\x9F\xA6\x99.cpp";
  const Ids ids = tok.encode(text, false, false);
  EXPECT_EQ(ids, (Ids{419, 374, 11162, 99, 247, 13, 10821}));  // 🦙 is three tokens
  StreamDecoder stream(tok);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  EXPECT_EQ(chunks, (std::vector<std::string>{" this", " is", " ", "", "\xF0\x9F\xA6\x99", ".", "cpp"}));
}

// Any byte string round-trips exactly: invalid UTF-8, control characters, runs of spaces
// (for SentencePiece the prefix space is removed again; U+2581 itself is left out, as
// SentencePiece reads it as an escaped space). The exceptions are bytes that never occur
// in UTF-8 (C0, C1, F5..FF), which some vocabs cannot spell: gpt-neox has no token for
// them (they are dropped, as llama.cpp drops them) and the DeepSeek vocabs made their
// characters user-defined tokens (which decode as their text). 0xFF stands for them here.
TEST(TokenizerRoundTrip, ArbitraryBytes) {
  std::mt19937 rng(11);
  const std::vector<std::string> atoms = {
      "a", "Zq", " ", "   ", "\n", "\r\n", "\t", "'s", "'LL", "7", "2024", "!?", "...", "\xC3\xA9", "e\xCC\x81",
      "\xE4\xBD\xA0\xE5\xA5\xBD", "\xF0\x9F\xA6\x99", "\xE3\x80\x80", "\xFF", "\x80", "\xC3", "\x01",
      "\xE2\x80\x8D", "<|im_end|>", "\xD0\xBD\xD0\xB5", "\xE1\x9E\x80"};
  for (const char* name : kAllVocabs) {
    const Tokenizer& tok = vocab(name);
    const std::string_view vocab_name(name);
    const bool spells_ff = tok.decode(tok.encode("\xFF", false, false)) == "\xFF";
    EXPECT_EQ(spells_ff, !vocab_name.starts_with("deepseek") && vocab_name != "gpt-neox") << name;
    for (int iter = 0; iter < 200; ++iter) {
      std::string text;
      const int n = static_cast<int>(rng() % 30);
      for (int i = 0; i < n; ++i) {
        const std::string& atom = atoms[rng() % atoms.size()];
        if (atom == "\xFF" && !spells_ff) continue;
        text += atom;
      }
      const Ids ids = tok.encode(text, false, false);
      EXPECT_EQ(tok.decode(ids), text) << name;
      StreamDecoder stream(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      EXPECT_EQ(streamed + stream.flush(), text) << name;
    }
  }
}

TEST(TokenizerSpeed, LongPromptTakesMilliseconds) {
  std::string prompt;
  while (prompt.size() < 12000) {
    prompt += "The quick brown fox (id 12345) jumps over the lazy dog; \xE4\xBD\xA0\xE5\xA5\xBD, caf\xC3\xA9! ";
    prompt += "    def f(x):\n        return x ** 2  # \xF0\x9F\xA6\x99\n";
  }
  for (const char* name : {"qwen2", "llama-bpe", "deepseek-llm", "llama-spm"}) {
    const Tokenizer& tok = vocab(name);
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = tok.encode(prompt, true, true);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %s: %zu bytes -> %zu tokens in %.2f ms\n", name, prompt.size(), ids.size(), ms);
    EXPECT_GT(ids.size(), 2000u);
    EXPECT_LT(ms, 1000.0);  // milliseconds in a release build; generous for sanitizer builds
    EXPECT_EQ(tok.decode(ids), prompt);
  }
}

}  // namespace
}  // namespace mt
