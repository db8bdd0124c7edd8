// llama.cpp's tokenizer test vectors (shared/testdata/vocab/*.inp/.out): every case of
// every vocab encodes to exactly the expected ids (no BOS/EOS, special-token text parsed
// as plain text), decodes back to its input, and streams to the same text in pieces that
// never end inside a UTF-8 character.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace mt {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Cases are separated by "\n__ggml_vocab_test__\n", which also ends the file; line i of
// the .out file holds the ids of case i.
std::vector<Case> load_cases(const std::string& vocab) {
  const std::string base = test::testdata("vocab/ggml-vocab-" + vocab + ".gguf");
  const std::string inp = read_file(base + ".inp");
  const std::string out = read_file(base + ".out");
  constexpr std::string_view kSep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(kSep, pos);
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + kSep.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (Case& c : cases) {
    EXPECT_TRUE(std::getline(lines, line)) << vocab << ": fewer .out lines than cases";
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

const Tokenizer& tokenizer_for(const std::string& vocab) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(vocab);
  if (it == cache.end()) {
    auto file = gguf::GgufFile::open(test::testdata("vocab/ggml-vocab-" + vocab + ".gguf"));
    MT_CHECK_MSG(file.ok(), file.status().to_string().c_str());
    auto tok = Tokenizer::from_gguf(*file);
    MT_CHECK_MSG(tok.ok(), tok.status().to_string().c_str());
    it = cache.emplace(vocab, std::move(tok).value()).first;
  }
  return it->second;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const tok::DecodedChar c = tok::decode_utf8(s, pos);
    if (c.cp == tok::kInvalidCodepoint) return false;
    pos += c.len;
  }
  return true;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, EncodeMatchesEveryCase) {
  const Tokenizer& tok = tokenizer_for(GetParam());
  const std::vector<Case> cases = load_cases(GetParam());
  ASSERT_GE(cases.size(), 46u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(cases[i].text, false, false);
    EXPECT_EQ(got, cases[i].ids) << GetParam() << " case " << i << " '" << cases[i].text << "'\n  got:     "
                                 << show(got) << "\n  expected:" << show(cases[i].ids);
    passed += got == cases[i].ids;
  }
  std::printf("  %s: %zu/%zu cases exact\n", GetParam().c_str(), passed, cases.size());
}

TEST_P(TokenizerVectors, DecodeGivesBackTheInput) {
  const Tokenizer& tok = tokenizer_for(GetParam());
  for (const Case& c : load_cases(GetParam())) {
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, false)), c.text);
    // The expected ids too (they are llama.cpp's, independent of our encoder).
    EXPECT_EQ(tok.decode(c.ids), c.text);
  }
}

TEST_P(TokenizerVectors, StreamingEqualsDecodeAndKeepsCharactersWhole) {
  const Tokenizer& tok = tokenizer_for(GetParam());
  for (const Case& c : load_cases(GetParam())) {
    StreamDecoder stream(tok);
    std::string all;
    for (int32_t id : c.ids) {
      const std::string chunk = stream.push(id);
      EXPECT_TRUE(valid_utf8(chunk)) << "chunk ends inside a character in '" << c.text << "'";
      all += chunk;
    }
    all += stream.flush();
    EXPECT_EQ(all, tok.decode(c.ids));
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerVectors,
                         ::testing::Values("llama-spm", "phi-3", "qwen2", "qwen35", "llama-bpe", "deepseek-llm",
                                           "deepseek-coder", "gpt-2"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace mt
