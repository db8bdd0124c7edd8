// Expert geometry from tensor metadata: grouping, compact vs padded totals, and clear
// errors on inconsistent expert tensors.
#include <gtest/gtest.h>

#include "experts/geometry.h"
#include "gguf/writer.h"
#include "test_util.h"

namespace mt {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

// Writes a sparse file and returns the geometry reader's verdict on it.
StatusOr<ExpertGeometry> geometry_of_writer(const GgufWriter& w, const std::string& name) {
  const std::string path = test::temp_path(name);
  gguf::WriteOptions sparse;
  sparse.sparse = true;
  MT_RETURN_IF_ERROR(w.write(path, sparse));
  MT_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return read_expert_geometry(f);
}

struct Layer {
  QuantType gate, up, down;
  uint64_t n_embd = 256, n_ff = 512, n_expert = 4;
  bool merged = false;
  bool has_gate = true;
};

StatusOr<ExpertGeometry> geometry_of(const std::vector<Layer>& layers, const std::string& name,
                                     uint32_t declared_experts = 0) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  if (declared_experts) w.set_u32("qwen3moe.expert_count", declared_experts);
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    if (l.merged) {
      w.add_tensor(p + "ffn_gate_up_exps.weight", l.gate, {l.n_embd, 2 * l.n_ff, l.n_expert}, {});
    } else {
      if (l.has_gate) w.add_tensor(p + "ffn_gate_exps.weight", l.gate, {l.n_embd, l.n_ff, l.n_expert}, {});
      w.add_tensor(p + "ffn_up_exps.weight", l.up, {l.n_embd, l.n_ff, l.n_expert}, {});
    }
    w.add_tensor(p + "ffn_down_exps.weight", l.down, {l.n_ff, l.n_embd, l.n_expert}, {});
    w.add_tensor(p + "attn_norm.weight", QuantType::F32, {l.n_embd}, {});
  }
  return geometry_of_writer(w, name);
}

TEST(Geometry, MixedLayersGroupAndSize) {
  // Two Q4_K/Q4_K/Q6_K layers, one Q4_K/Q4_K/Q4_K, one BF16.
  const Layer q46{QuantType::Q4_K, QuantType::Q4_K, QuantType::Q6_K};
  const Layer q44{QuantType::Q4_K, QuantType::Q4_K, QuantType::Q4_K};
  const Layer bf{QuantType::BF16, QuantType::BF16, QuantType::BF16};
  auto g = geometry_of({q46, q44, q46, bf}, "mixed.gguf");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->layers.size(), 4u);
  EXPECT_EQ(g->n_expert, 4u);
  const uint64_t q4 = 256 / 256 * 144 * 512;   // gate/up: n_embd 256 in, 512 out
  const uint64_t q6_down = 512 / 256 * 210 * 256;
  const uint64_t q4_down = 512 / 256 * 144 * 256;
  const uint64_t bf16 = 256 * 512 * 2;
  EXPECT_EQ(g->layers[0].bytes_per_expert(), 2 * q4 + q6_down);
  EXPECT_EQ(g->layers[1].bytes_per_expert(), 2 * q4 + q4_down);
  EXPECT_EQ(g->layers[3].bytes_per_expert(), 3 * bf16);
  EXPECT_EQ(g->compact_bytes, 4 * (2 * (2 * q4 + q6_down) + (2 * q4 + q4_down) + 3 * bf16));
  EXPECT_EQ(g->padded_bytes, 4 * 4 * (3 * bf16));
  ASSERT_EQ(g->groups.size(), 3u);
  EXPECT_EQ(g->groups[0].types, "bf16/bf16/bf16");  // largest first
  EXPECT_EQ(g->groups[1].layers, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(g->groups[1].types, "q4_K/q4_K/q6_K");
}

TEST(Geometry, MergedGateUpSplitsInHalves) {
  Layer l{QuantType::Q8_0, QuantType::Q8_0, QuantType::Q8_0};
  l.merged = true;
  auto g = geometry_of({l}, "merged.gguf");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const uint64_t half = 256 / 32 * 34 * 512;
  EXPECT_TRUE(g->layers[0].merged_gate_up);
  EXPECT_EQ(g->layers[0].gate().bytes_per_expert, half);
  EXPECT_EQ(g->layers[0].up().bytes_per_expert, half);
  EXPECT_EQ(g->layers[0].gate().n_out, 512u);
}

TEST(Geometry, UngatedExpertsHaveNoGateBytes) {
  Layer l{QuantType::F16, QuantType::F16, QuantType::F16};
  l.has_gate = false;
  auto g = geometry_of({l}, "ungated.gguf");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_FALSE(g->layers[0].gate().present);
  EXPECT_EQ(g->layers[0].bytes_per_expert(), 2u * 256 * 512 * 2);
}

TEST(Geometry, DenseModelHasNoLayers) {
  auto g = geometry_of({}, "dense.gguf");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->layers.empty());
  EXPECT_EQ(g->compact_bytes, 0u);
}

TEST(Geometry, ExpertCountMismatchBetweenLayersIsAnError) {
  Layer a{QuantType::F16, QuantType::F16, QuantType::F16};
  Layer b = a;
  b.n_expert = 8;
  auto g = geometry_of({a, b}, "count.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("experts"), std::string::npos) << g.status().message();
}

TEST(Geometry, MetadataExpertCountMustMatchTensors) {
  Layer a{QuantType::F16, QuantType::F16, QuantType::F16};
  auto g = geometry_of({a}, "declared.gguf", 16);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("metadata says 16 experts"), std::string::npos) << g.status().message();
}

TEST(Geometry, DownShapeMustInvertUp) {
  GgufWriter w;
  w.add_tensor("blk.0.ffn_up_exps.weight", QuantType::F16, {256, 512, 4}, {});
  w.add_tensor("blk.0.ffn_down_exps.weight", QuantType::F16, {256, 512, 4}, {});
  auto g = geometry_of_writer(w, "badshape.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("does not invert"), std::string::npos) << g.status().message();
}

TEST(Geometry, TwoDimensionalExpertTensorIsAnError) {
  GgufWriter w;
  w.add_tensor("blk.0.ffn_up_exps.weight", QuantType::F16, {256, 512}, {});
  auto g = geometry_of_writer(w, "twod.gguf");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("expected 3"), std::string::npos) << g.status().message();
}

TEST(Geometry, RealKjvModel) {
  auto f = GgufFile::open(test::testdata("models/kjv-moe/kjv-moe-f16.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto g = read_expert_geometry(*f);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->layers.size(), 6u);
  EXPECT_EQ(g->n_expert, 16u);
  // F16 experts: gate/up 256 x 128, down 128 x 256, 2 bytes each.
  EXPECT_EQ(g->layers[0].bytes_per_expert(), 3u * 256 * 128 * 2);
  EXPECT_EQ(g->compact_bytes, 6u * 16 * 3 * 256 * 128 * 2);
  EXPECT_EQ(g->compact_bytes, g->padded_bytes);
  ASSERT_EQ(g->groups.size(), 1u);
}

}  // namespace
}  // namespace mt
