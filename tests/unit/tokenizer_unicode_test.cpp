// The pieces under the tokenizers: the generated Unicode tables, UTF-8 decoding, GPT-2's
// byte-level alphabet and the pre-tokenizer splits (hand-checked against the regexes).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace mt::tok {
namespace {

TEST(TokenizerUnicode, CategoryGroups) {
  EXPECT_EQ(category('A'), UCat::kLetter);
  EXPECT_EQ(category(0xE9), UCat::kLetter);     // é
  EXPECT_EQ(category(0x4E00), UCat::kLetter);   // 一
  EXPECT_EQ(category(0x0301), UCat::kMark);     // combining acute
  EXPECT_EQ(category(0x17B6), UCat::kMark);     // Khmer vowel sign aa (Mc)
  EXPECT_EQ(category('7'), UCat::kNumber);
  EXPECT_EQ(category(0x0663), UCat::kNumber);   // Arabic-Indic three
  EXPECT_EQ(category(0x2167), UCat::kNumber);   // Roman numeral eight (Nl)
  EXPECT_EQ(category(0xBD), UCat::kNumber);     // ½ (No)
  EXPECT_EQ(category('!'), UCat::kPunct);
  EXPECT_EQ(category('_'), UCat::kPunct);
  EXPECT_EQ(category(0xFF5E), UCat::kSymbol);   // fullwidth tilde
  EXPECT_EQ(category('$'), UCat::kSymbol);
  EXPECT_EQ(category(0x1F999), UCat::kSymbol);  // 🦙
  EXPECT_EQ(category(0xA0), UCat::kSeparator);
  EXPECT_EQ(category(0), UCat::kOther);
  EXPECT_EQ(category(0x200D), UCat::kOther);    // zero width joiner (Cf)
  EXPECT_EQ(category(0x0378), UCat::kUnassigned);
  EXPECT_EQ(category(0x10FFFF), UCat::kUnassigned);
  EXPECT_EQ(category(kInvalidCodepoint), UCat::kOther);
}

TEST(TokenizerUnicode, WhiteSpaceIsThePropertyNotTheCategory) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u,
                      0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(is_whitespace(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x08u, 0x1Cu, 0x1Fu, 0x41u, 0x180Eu, 0x200Bu, 0xFEFFu, kInvalidCodepoint}) {
    EXPECT_FALSE(is_whitespace(cp)) << std::hex << cp;
  }
}

TEST(TokenizerUnicode, TablesAreSortedAndDisjoint) {
  ASSERT_GT(kCategoryRangeCount, 1000u);
  for (size_t i = 0; i < kCategoryRangeCount; ++i) {
    EXPECT_LE(kCategoryRanges[i].first, kCategoryRanges[i].last);
    EXPECT_NE(kCategoryRanges[i].cat, UCat::kUnassigned);
    if (i > 0) {
      EXPECT_GT(kCategoryRanges[i].first, kCategoryRanges[i - 1].last);
    }
  }
  EXPECT_LE(kCategoryRanges[kCategoryRangeCount - 1].last, 0x10FFFFu);
}

TEST(TokenizerUnicode, Utf8DecodeAcceptsValidAndIsolatesInvalidBytes) {
  const std::string valid = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99";  // a é € 🦙
  const uint32_t want[] = {'a', 0xE9, 0x20AC, 0x1F999};
  size_t pos = 0;
  for (uint32_t cp : want) {
    const DecodedChar c = decode_utf8(valid, pos);
    EXPECT_EQ(c.cp, cp);
    pos += c.len;
  }
  EXPECT_EQ(pos, valid.size());
  for (std::string bad : {std::string("\x80"), std::string("\xC3"), std::string("\xC3("), std::string("\xC0\x80"),
                          std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80"), std::string("\xFF")}) {
    const DecodedChar c = decode_utf8(bad, 0);
    EXPECT_EQ(c.cp, kInvalidCodepoint);
    EXPECT_EQ(c.len, 1u);
  }
  std::string out;
  for (uint32_t cp : want) append_utf8(out, cp);
  EXPECT_EQ(out, valid);
}

TEST(TokenizerByteLevel, AlphabetIsABijection) {
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);  // Ġ
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_codepoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);  // the 68th remapped byte
  std::string all;
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
    all += static_cast<char>(b);
  }
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  EXPECT_EQ(byte_level_encode("a b"), "a\xC4\xA0" "b");
  EXPECT_EQ(codepoint_to_byte(0x2581), -1);
  EXPECT_EQ(byte_level_decode("x\xE2\x96\x81"), "x\xE2\x96\x81");  // outside the alphabet: kept
}

std::vector<std::string> words(PreType type, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : pretokenize(type, text)) out.emplace_back(w);
  return out;
}

using Words = std::vector<std::string>;

TEST(TokenizerPretokenize, Gpt2) {
  EXPECT_EQ(words(PreType::kGpt2, "Hello world's  end!!\n"),
            (Words{"Hello", " world", "'s", " ", " end", "!!", "\n"}));
  EXPECT_EQ(words(PreType::kGpt2, "x  \t y 123abc"), (Words{"x", "  \t", " y", " 123", "abc"}));
  EXPECT_EQ(words(PreType::kGpt2, "I'M"), (Words{"I", "'", "M"}));  // contractions are lower case only
}

TEST(TokenizerPretokenize, Llama3AndQwen2) {
  EXPECT_EQ(words(PreType::kLlama3, "12345"), (Words{"123", "45"}));
  EXPECT_EQ(words(PreType::kQwen2, "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(words(PreType::kQwen2, "  Hello\n\n  x"), (Words{" ", " Hello", "\n\n", " ", " x"}));
  EXPECT_EQ(words(PreType::kLlama3, "I'M ok.\n\tgo"), (Words{"I", "'M", " ok", ".\n", "\tgo"}));
  EXPECT_EQ(words(PreType::kQwen2, " \n \n  "), (Words{" \n \n", "  "}));
}

TEST(TokenizerPretokenize, Qwen35KeepsCombiningMarksInWords) {
  const std::string e_acute = "e\xCC\x81";  // e + U+0301
  EXPECT_EQ(words(PreType::kQwen2, e_acute), (Words{"e", "\xCC\x81"}));
  EXPECT_EQ(words(PreType::kQwen35, e_acute), (Words{e_acute}));
  EXPECT_EQ(words(PreType::kQwen35, "a" + e_acute + "!"), (Words{"a" + e_acute, "!"}));
}

TEST(TokenizerPretokenize, DeepseekPasses) {
  EXPECT_EQ(words(PreType::kDeepseekLlm, "ab\ncd 12"), (Words{"ab", "\n", "cd", " ", "12"}));
  EXPECT_EQ(words(PreType::kDeepseekLlm, "hi, 你好  "), (Words{"hi", ",", " ", "你好", "  "}));
  // "=" is a symbol (Sm), not punctuation: it stays in the gap.
  EXPECT_EQ(words(PreType::kDeepseekCoder, "x = 42;\r\n"), (Words{"x", " = ", "4", "2", ";", "\r", "\n"}));
}

TEST(TokenizerPretokenize, DefaultPasses) {
  EXPECT_EQ(words(PreType::kDefault, "a+b 12345!"), (Words{"a", "+", "b", " ", "123", "45", "!"}));
}

// Whatever the input, the words tile it: no empty word, concatenation gives it back.
TEST(TokenizerPretokenize, WordsTileAnyInput) {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1", "234", "!", "...",
                                          "\xC3\xA9", "e\xCC\x81", "\xE4\xBD\xA0", "\xF0\x9F\xA6\x99", "\xE3\x80\x80",
                                          "\xFF", "\x80", "\xC3", "\x00", "\xE2\x80\x8D"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    for (PreType type : {PreType::kDefault, PreType::kGpt2, PreType::kLlama3, PreType::kQwen2, PreType::kQwen35,
                         PreType::kDeepseekLlm, PreType::kDeepseekCoder}) {
      std::string joined;
      for (std::string_view w : pretokenize(type, text)) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      EXPECT_EQ(joined, text) << pre_type_name(type);
    }
  }
}

TEST(TokenizerPretokenize, Names) {
  EXPECT_EQ(pre_type_from_name("").value(), PreType::kDefault);
  EXPECT_EQ(pre_type_from_name("olmo").value(), PreType::kGpt2);
  EXPECT_EQ(pre_type_from_name("llama3").value(), PreType::kLlama3);
  EXPECT_EQ(pre_type_from_name("deepseek-r1-qwen").value(), PreType::kQwen2);
  const auto bad = pre_type_from_name("gpt-4o");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("'gpt-4o'"), std::string::npos);
}

}  // namespace
}  // namespace mt::tok
