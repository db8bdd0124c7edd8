// Tokenizers built from small hand-written vocabularies (the merge and score rules, byte
// fallback, special-token precedence) and from corrupt metadata, which must give a Status
// naming what is wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mt {
namespace {

using gguf::GgufWriter;
using Ids = std::vector<int32_t>;

StatusOr<Tokenizer> load(const GgufWriter& w, const std::string& name) {
  const std::string path = test::temp_path(name + ".gguf");
  MT_RETURN_IF_ERROR(w.write(path));
  MT_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  return Tokenizer::from_gguf(file);
}

// Byte-level BPE: a b c Ġ ab abc Ġa aa x (ids 0..8) with merges a+b (rank 0), ab+c (rank 1),
// Ġ+a (rank 2), a+a (rank 3); 9 = <|end|> control (eos), 10 = <|end|><x> control (longer),
// 11 = @@ user-defined.
GgufWriter tiny_bpe() {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c", "\xC4\xA0", "ab", "abc", "\xC4\xA0" "a", "aa", "x",
                                              "<|end|>", "<|end|><x>", "@@"});
  w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 4});
  w.set_string_array("tokenizer.ggml.merges", {"a b", "ab c", "\xC4\xA0 a", "a a"});
  w.set_u32("tokenizer.ggml.eos_token_id", 9);
  return w;
}

// SentencePiece: <unk> <s> </s>, ▁ a b, ▁a ab, and byte tokens for 'z' and 0xC3.
GgufWriter tiny_spm(float score_a_b, float score_space_a) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens",
                     {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "<0x7A>", "<0xC3>"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -2, score_space_a, score_a_b, 0, 0});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 6, 6});
  return w;
}

TEST(TokenizerTinyBpe, MergesByRankLeftmostFirst) {
  auto tok = load(tiny_bpe(), "tiny_bpe");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{5}));
  // " ab": a+b (rank 0) wins over Ġ+a (rank 2).
  EXPECT_EQ(tok->encode(" ab", false, false), (Ids{3, 4}));
  EXPECT_EQ(tok->encode(" a", false, false), (Ids{6}));
  // "aaa": equal ranks, the leftmost pair first.
  EXPECT_EQ(tok->encode("aaa", false, false), (Ids{7, 0}));
  // 'q' has no token: dropped, as llama.cpp drops it.
  EXPECT_EQ(tok->encode("aqb", false, false), (Ids{0, 1}));
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_TRUE(tok->is_eog(9));
}

TEST(TokenizerTinyBpe, SpecialTokensLongestFirst) {
  auto tok = load(tiny_bpe(), "tiny_bpe_special");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("a<|end|><x>b<|end|>", false, true), (Ids{0, 10, 1, 9}));
  // As plain text; this vocab spells only 'a' and 'x' of it.
  EXPECT_EQ(tok->encode("a<|end|><x>", false, false), (Ids{0, 8}));
  EXPECT_EQ(tok->encode("a@@b", false, false), (Ids{0, 11, 1}));  // user-defined: always
  EXPECT_EQ(tok->decode(Ids{0, 10, 11}), "a@@");
  EXPECT_EQ(tok->decode(Ids{0, 10, 11}, true), "a<|end|><x>@@");
}

TEST(TokenizerTinySpm, HigherScoreMergesFirst) {
  {
    auto tok = load(tiny_spm(/*ab=*/-0.5f, /*▁a=*/-1.0f), "tiny_spm_ab");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ(tok->encode("ab", false, false), (Ids{3, 7}));  // ▁ ab
    EXPECT_EQ(tok->encode("ab", true, false), (Ids{1, 3, 7}));  // SPM adds BOS by default
  }
  {
    auto tok = load(tiny_spm(/*ab=*/-1.0f, /*▁a=*/-0.5f), "tiny_spm_space_a");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_EQ(tok->encode("ab", false, false), (Ids{6, 5}));  // ▁a b
    EXPECT_EQ(tok->decode(Ids{6, 5}), "ab");
  }
}

TEST(TokenizerTinySpm, ByteFallbackAndUnknown) {
  auto tok = load(tiny_spm(-0.5f, -1.0f), "tiny_spm_bytes");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // 'z' has a byte token, 'é' (C3 A9) only half of one: A9 becomes <unk>.
  EXPECT_EQ(tok->encode("az\xC3\xA9", false, false), (Ids{6, 8, 9, 0}));
  EXPECT_EQ(tok->token_to_piece(8), "z");
  EXPECT_EQ(tok->unk(), 0);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
}

TEST(TokenizerMetadata, FlagsFromMetadataOverrideDefaults) {
  GgufWriter w = tiny_spm(-0.5f, -1.0f);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", true);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  auto tok = load(w, "flags");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("ab", true, false), (Ids{7, 2}));  // no BOS, no ▁, EOS
  EXPECT_EQ(tok->decode(Ids{7}), "ab");
}

TEST(TokenizerMetadata, SpecialIdOutsideTheVocabIsIgnored) {
  GgufWriter w = tiny_bpe();
  w.set_u32("tokenizer.ggml.bos_token_id", 1000);
  w.set_u32("tokenizer.ggml.padding_token_id", 12);  // == n_vocab
  auto tok = load(w, "bad_ids");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_EQ(tok->pad(), -1);
}

void expect_error(const GgufWriter& w, const std::string& name, StatusCode code, const std::string& needle) {
  auto tok = load(w, name);
  ASSERT_FALSE(tok.ok()) << name;
  EXPECT_EQ(tok.status().code(), code) << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().to_string();
}

TEST(TokenizerMetadata, ErrorsNameTheProblem) {
  {
    GgufWriter w = tiny_bpe();
    w.remove("tokenizer.ggml.model");
    expect_error(w, "no_model", StatusCode::kNotFound, "tokenizer.ggml.model");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string("tokenizer.ggml.model", "bert");
    expect_error(w, "bert", StatusCode::kUnimplemented, "'bert'");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_u32("tokenizer.ggml.model", 2);
    expect_error(w, "model_type", StatusCode::kInvalidArgument, "tokenizer.ggml.model");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string("tokenizer.ggml.pre", "gpt-4o");
    expect_error(w, "pre", StatusCode::kUnimplemented, "'gpt-4o'");
  }
  {
    GgufWriter w = tiny_bpe();
    w.remove("tokenizer.ggml.tokens");
    expect_error(w, "no_tokens", StatusCode::kNotFound, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_u32_array("tokenizer.ggml.tokens", {1, 2, 3});
    expect_error(w, "token_ints", StatusCode::kDataLoss, "expected strings");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string_array("tokenizer.ggml.tokens", {});
    expect_error(w, "no_token", StatusCode::kDataLoss, "empty");
  }
  {
    GgufWriter w = tiny_spm(-1, -1);
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "a", "c", "d", "e", "f"});
    expect_error(w, "duplicate", StatusCode::kDataLoss, "tokens 3 and 5 have the same text");
  }
  {
    GgufWriter w = tiny_bpe();
    w.remove("tokenizer.ggml.merges");
    expect_error(w, "no_merges", StatusCode::kNotFound, "tokenizer.ggml.merges");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string_array("tokenizer.ggml.merges", {"a b", "a q"});
    expect_error(w, "merge_unknown", StatusCode::kDataLoss, "merge 1 'a q' references 'q', which is not a token");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string_array("tokenizer.ggml.merges", {"b c"});
    expect_error(w, "merge_result", StatusCode::kDataLoss, "merges into 'bc', which is not a token");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string_array("tokenizer.ggml.merges", {"ab"});
    expect_error(w, "merge_no_space", StatusCode::kDataLoss, "merge 0 'ab'");
  }
  {
    GgufWriter w = tiny_spm(-1, -1);
    w.set_f32_array("tokenizer.ggml.scores", {0, 0});
    expect_error(w, "short_scores", StatusCode::kDataLoss, "2 scores for 10 tokens");
  }
  {
    GgufWriter w = tiny_spm(-1, -1);
    w.set_f32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    expect_error(w, "float_types", StatusCode::kDataLoss, "tokenizer.ggml.token_type");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    expect_error(w, "bos_missing", StatusCode::kDataLoss, "no bos_token_id");
  }
  {
    GgufWriter w = tiny_bpe();
    w.set_string("tokenizer.ggml.bos_token_id", "1");
    expect_error(w, "bos_string", StatusCode::kInvalidArgument, "tokenizer.ggml.bos_token_id");
  }
}

TEST(TokenizerMetadata, RealVocabWithoutPreKeyLoads) {
  auto file = gguf::GgufFile::open(test::testdata("vocab/ggml-vocab-gpt-neox.gguf"));
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->n_vocab(), 50432u);
  EXPECT_STREQ(tok->pre_name(), "default");
  EXPECT_EQ(tok->decode(tok->encode("Hello world, 12345!", false, false)), "Hello world, 12345!");
}

}  // namespace
}  // namespace mt
