// Real files: every vocab GGUF in the shared test data parses, and its header and every
// metadata pair match metadata_expected.json (dumped by an independent tool); the
// kjv-moe F16 model (converted by llama.cpp) has its 75 tensors with the right shapes,
// types and placement.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "core/checked_math.h"
#include "experts/geometry.h"
#include "gguf/reader.h"
#include "test_util.h"

namespace mt::gguf {
namespace {

using nlohmann::json;

// The dumper's type spellings.
const std::map<std::string, ValueType>& dumper_types() {
  static const std::map<std::string, ValueType> m = {
      {"u8", ValueType::kU8},   {"i8", ValueType::kI8},     {"u16", ValueType::kU16}, {"i16", ValueType::kI16},
      {"u32", ValueType::kU32}, {"i32", ValueType::kI32},   {"f32", ValueType::kF32}, {"bool", ValueType::kBool},
      {"str", ValueType::kString}, {"arr", ValueType::kArray}, {"u64", ValueType::kU64}, {"i64", ValueType::kI64},
      {"f64", ValueType::kF64}};
  return m;
}

ValueType dumper_type(const std::string& name) {
  auto it = dumper_types().find(name);
  EXPECT_NE(it, dumper_types().end()) << "unknown type in metadata_expected.json: " << name;
  return it == dumper_types().end() ? ValueType::kU8 : it->second;
}

bool is_float(ValueType t) { return t == ValueType::kF32 || t == ValueType::kF64; }

// A scalar value against its JSON dump.
void expect_scalar(const Value& v, const json& want, const std::string& where) {
  SCOPED_TRACE(where);
  if (v.type == ValueType::kString) {
    // The dumper cuts long strings (chat templates) and marks the cut with "…".
    const std::string_view actual = std::get<std::string_view>(v.data);
    std::string text = want.get<std::string>();
    constexpr std::string_view kCut = "\u2026";
    if (text.ends_with(kCut) && actual.size() > text.size() - kCut.size()) {
      text.resize(text.size() - kCut.size());
      EXPECT_EQ(actual.substr(0, text.size()), text);
    } else {
      EXPECT_EQ(actual, text);
    }
  } else if (v.type == ValueType::kBool) {
    EXPECT_EQ(std::get<bool>(v.data), want.get<bool>());
  } else if (v.type == ValueType::kF32) {
    EXPECT_EQ(static_cast<float>(std::get<double>(v.data)), want.get<float>());
  } else if (v.type == ValueType::kF64) {
    EXPECT_EQ(std::get<double>(v.data), want.get<double>());
  } else if (const auto* i = std::get_if<int64_t>(&v.data)) {
    EXPECT_EQ(*i, want.get<int64_t>());
  } else {
    EXPECT_EQ(std::get<uint64_t>(v.data), want.get<uint64_t>());
  }
}

// Array element i against its JSON dump.
void expect_element(const Array& a, uint64_t i, const json& want, const std::string& where) {
  SCOPED_TRACE(where + "[" + std::to_string(i) + "]");
  if (a.elem_type == ValueType::kString) {
    EXPECT_EQ(a.strings[i], want.get<std::string>());
  } else if (a.elem_type == ValueType::kBool) {
    EXPECT_EQ(a.raw[i] != 0, want.get<bool>());
  } else if (is_float(a.elem_type)) {
    EXPECT_EQ(a.float_at(i), want.get<double>());
  } else {
    EXPECT_EQ(a.int_at(i), want.get<int64_t>());
  }
}

void expect_matches_dump(const GgufFile& f, const json& want) {
  EXPECT_EQ(f.file_size(), want.at("file_size").get<uint64_t>());
  EXPECT_EQ(f.version(), want.at("version").get<uint32_t>());
  EXPECT_EQ(f.tensors().size(), want.at("n_tensors").get<size_t>());
  EXPECT_EQ(f.metadata().size(), want.at("n_kv").get<size_t>());
  EXPECT_EQ(f.data_offset(), want.at("end_of_kv_and_tensor_info").get<uint64_t>());
  const json& kvs = want.at("kv");
  EXPECT_EQ(f.metadata().size(), kvs.size());
  for (const auto& [key, expected] : kvs.items()) {
    const Value* v = f.find(key);
    ASSERT_NE(v, nullptr) << "missing key " << key;
    ASSERT_EQ(v->type, dumper_type(expected.at("type").get<std::string>())) << key;
    if (v->type != ValueType::kArray) {
      expect_scalar(*v, expected.at("value"), key);
      continue;
    }
    const Array& a = *v->array();
    const json& arr = expected.at("value");
    EXPECT_EQ(a.elem_type, dumper_type(arr.at("array_elem_type").get<std::string>())) << key;
    EXPECT_EQ(a.count, arr.at("n").get<uint64_t>()) << key;
    if (a.elem_type == ValueType::kString) {
      EXPECT_EQ(a.strings.size(), a.count) << key;
    } else {
      EXPECT_EQ(a.raw.size(), a.count * scalar_size(a.elem_type)) << key;
    }
    const json& first = arr.at("first");
    ASSERT_LE(first.size(), a.count) << key;
    for (size_t i = 0; i < first.size(); ++i) expect_element(a, i, first[i], key);
  }
}

json load_expected() {
  std::ifstream in(test::testdata("vocab/metadata_expected.json"));
  EXPECT_TRUE(in.good());
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST(GgufTestdata, EveryVocabFileMatchesTheIndependentDump) {
  const json expected = load_expected();
  ASSERT_TRUE(expected.is_object());
  std::set<std::string> checked;
  int n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::testdata("vocab"))) {
    if (entry.path().extension() != ".gguf") continue;
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    ++n_files;
    auto f = GgufFile::open(entry.path().string());
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    // Facts that hold for every vocab-only file, dumped or not.
    EXPECT_EQ(f->tensors().size(), 0u);
    EXPECT_EQ(f->data_offset(), f->file_size());  // no padding after the KV section
    EXPECT_EQ(f->alignment(), kDefaultAlignment);
    auto tokens = f->get_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    EXPECT_EQ((*tokens)->elem_type, ValueType::kString);
    EXPECT_GT((*tokens)->count, 1000u);
    auto types = f->get_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.ok());
    EXPECT_EQ((*types)->count, (*tokens)->count);
    EXPECT_TRUE(f->get_string("tokenizer.ggml.model").ok());
    EXPECT_TRUE(f->get_string("general.architecture").ok());
    if (expected.contains(file)) {
      expect_matches_dump(*f, expected[file]);
      checked.insert(file);
    }
  }
  EXPECT_GE(n_files, 6);
  for (const auto& [file, unused] : expected.items()) EXPECT_TRUE(checked.count(file)) << file << " not found";
}

TEST(GgufTestdata, VocabSpotChecks) {
  auto spm = GgufFile::open(test::testdata("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(spm.ok()) << spm.status().to_string();
  EXPECT_EQ(spm->file_size(), 723869u);
  EXPECT_EQ(*spm->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ((*spm->get_array("tokenizer.ggml.tokens"))->count, 32000u);
  EXPECT_EQ((*spm->get_array("tokenizer.ggml.scores"))->elem_type, ValueType::kF32);

  auto neox = GgufFile::open(test::testdata("vocab/ggml-vocab-gpt-neox.gguf"));
  ASSERT_TRUE(neox.ok()) << neox.status().to_string();
  EXPECT_EQ(neox->get_string("tokenizer.ggml.pre").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*neox->get_array("tokenizer.ggml.tokens"))->count, 50432u);

  auto dsl = GgufFile::open(test::testdata("vocab/ggml-vocab-deepseek-llm.gguf"));
  ASSERT_TRUE(dsl.ok()) << dsl.status().to_string();
  EXPECT_EQ(*dsl->get_string("tokenizer.ggml.pre"), "deepseek-llm");
  EXPECT_EQ((*dsl->get_array("tokenizer.ggml.tokens"))->count, 102400u);
  EXPECT_EQ((*dsl->get_array("tokenizer.ggml.merges"))->count, 99757u);
}

TEST(GgufTestdata, KjvMoeF16Tensors) {
  auto f = GgufFile::open(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 29u);
  ASSERT_EQ(f->tensors().size(), 75u);
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ((*f->get_array("tokenizer.ggml.tokens"))->count, 4096u);
  EXPECT_EQ((*f->get_array("tokenizer.ggml.merges"))->count, 3839u);
  EXPECT_EQ(*f->get_u32("tokenizer.ggml.bos_token_id"), 4095u);
  EXPECT_EQ(*f->get_u32("qwen3moe.expert_count"), 16u);
  EXPECT_EQ(*f->get_u32("qwen3moe.expert_used_count"), 4u);
  EXPECT_EQ(*f->get_u32("qwen3moe.expert_feed_forward_length"), 128u);
  EXPECT_EQ(*f->get_u32("qwen3moe.context_length"), 1024u);
  EXPECT_EQ(*f->get_f32("qwen3moe.rope.freq_base"), 10000.0f);
  EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_bos_token"));

  int n_exps = 0;
  uint64_t next_offset = 0;
  for (const TensorInfo& t : f->tensors()) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(t.offset, next_offset);  // ggml's packed, aligned layout
    next_offset = *checked_align_up(t.offset + t.nbytes, f->alignment());
    EXPECT_EQ(t.nbytes, t.n_elements() * (t.type == QuantType::F16 ? 2 : 4));
    const std::string_view name = t.name;
    const bool is_exps = name.find("_exps.weight") != std::string_view::npos;
    if (is_exps) {
      ++n_exps;
      EXPECT_EQ(t.type, QuantType::F16);
      EXPECT_EQ(t.n_dims, 3u);
      const bool down = name.find("ffn_down_exps") != std::string_view::npos;
      const std::array<uint64_t, 4> want = down ? std::array<uint64_t, 4>{128, 256, 16, 1}
                                                : std::array<uint64_t, 4>{256, 128, 16, 1};
      EXPECT_EQ(t.ne, want);
      EXPECT_EQ(t.matrix_bytes(), 256u * 128 * 2);
    } else if (name.ends_with("_norm.weight") || name.ends_with("ffn_gate_inp.weight")) {
      EXPECT_EQ(t.type, QuantType::F32);
    } else {
      EXPECT_EQ(t.type, QuantType::F16);
    }
  }
  EXPECT_EQ(n_exps, 18);  // 6 layers x gate, up, down
  EXPECT_EQ(f->data_offset() + next_offset, f->file_size());

  const TensorInfo* router = f->find_tensor("blk.0.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->n_dims, 2u);
  EXPECT_EQ(router->ne[0], 256u);
  EXPECT_EQ(router->ne[1], 16u);
  const TensorInfo* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne[0], 256u);
  EXPECT_EQ(embd->ne[1], 4096u);
  EXPECT_EQ(f->tensor_data(*embd).size(), 256u * 4096 * 2);

  auto g = read_expert_geometry(*f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->layers.size(), 6u);
  EXPECT_EQ(g->n_expert, 16u);
  ASSERT_EQ(g->groups.size(), 1u);
  EXPECT_EQ(g->groups[0].bytes_per_expert(), 3u * 256 * 128 * 2);
  EXPECT_EQ(g->compact_bytes, 6u * 16 * 3 * 256 * 128 * 2);
}

}  // namespace
}  // namespace mt::gguf
