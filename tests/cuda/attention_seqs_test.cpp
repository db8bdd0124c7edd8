// Several sequences' decode tokens in one launch (AttentionArgs / AttnPrepArgs seq_rows):
// each token's RoPE'd K / V rows land in its own sequence's cache at its own position
// byte-equal to a launch per sequence, and its attention output over its own cache and
// length equals a launch per sequence (within 1e-5 of the row: the split differs), for
// the grouped and the warps kernels (one chunk and several), sliding windows and sinks,
// every KV type; the quantized output rows where attention() says it wrote them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/kernels/mmvq.h"
#include "cuda/kernels/ops.h"
#include "cuda_test_util.h"

namespace mt::cuda {
namespace {

using test::randn;
using test::to_device;
using test::to_host;

struct Case {
  QuantType type;
  int D, n_head, n_head_kv;
  std::vector<uint32_t> lengths;  // each sequence's positions before its decode token
  uint32_t warp_max = 0;
  uint32_t window = 0;
  bool sinks = false;
};

void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << type_name(c.type) << " D " << c.D << " heads " << c.n_head << "/" << c.n_head_kv
                                    << " sequences " << c.lengths.size() << " warp_max " << c.warp_max << " window "
                                    << c.window << " sinks " << c.sinks);
  std::mt19937 rng(seed);
  const int S = static_cast<int>(c.lengths.size()), D = c.D, kv_dim = c.n_head_kv * D;
  const uint64_t rb = *row_bytes(c.type, static_cast<uint64_t>(kv_dim));
  const int Q = c.n_head * D;
  // Per sequence: a cache of length + 1 rows, its first `length` rows filled with random
  // bytes-as-values through attn_prep of random rows (so every type's rows are valid).
  std::vector<DeviceBuffer> k_one, v_one, k_all, v_all;
  for (int s = 0; s < S; ++s) {
    const uint32_t n = c.lengths[s] + 1;
    for (auto* set : {&k_one, &v_one, &k_all, &v_all}) set->emplace_back(n * rb);
    if (c.lengths[s] > 0) {
      const std::vector<float> rows = randn(static_cast<size_t>(c.lengths[s]) * (Q + 2 * kv_dim), rng);
      DeviceBuffer dr = to_device(rows), dq(static_cast<size_t>(c.lengths[s]) * Q * sizeof(float));
      AttnPrepArgs pa;
      pa.q_src = dr.as<float>(), pa.k_src = pa.q_src + Q, pa.v_src = pa.q_src + Q + kv_dim;
      pa.q_stride = pa.k_stride = pa.v_stride = Q + 2 * kv_dim;
      pa.n_tokens = static_cast<int>(c.lengths[s]), pa.n_head = c.n_head, pa.n_head_kv = c.n_head_kv, pa.head_dim = D;
      pa.n_rot = D, pa.q_out = dq.as<float>(), pa.kv_type = c.type, pa.row_bytes = rb;
      pa.k_cache = k_one[s].as<uint8_t>(), pa.v_cache = v_one[s].as<uint8_t>();
      attn_prep(pa, nullptr);
      MT_CUDA_CHECK(cudaMemcpy(k_all[s].get(), k_one[s].get(), n * rb, cudaMemcpyDeviceToDevice));
      MT_CUDA_CHECK(cudaMemcpy(v_all[s].get(), v_one[s].get(), n * rb, cudaMemcpyDeviceToDevice));
    }
  }
  // The decode token of every sequence: one row each of q | k | v.
  const std::vector<float> rows = randn(static_cast<size_t>(S) * (Q + 2 * kv_dim), rng, 1.5f);
  DeviceBuffer dr = to_device(rows);
  const std::vector<float> sink_logits = randn(static_cast<size_t>(c.n_head), rng);
  DeviceBuffer dsinks = to_device(sink_logits);
  AttnPrepArgs pa;
  pa.q_src = dr.as<float>(), pa.k_src = pa.q_src + Q, pa.v_src = pa.q_src + Q + kv_dim;
  pa.q_stride = pa.k_stride = pa.v_stride = Q + 2 * kv_dim;
  pa.n_head = c.n_head, pa.n_head_kv = c.n_head_kv, pa.head_dim = D, pa.n_rot = D;
  pa.kv_type = c.type, pa.row_bytes = rb;
  AttentionArgs aa;
  aa.kv_type = c.type, aa.kv_row_bytes = rb, aa.n_head = c.n_head, aa.n_head_kv = c.n_head_kv, aa.head_dim = D;
  aa.warp_max = c.warp_max, aa.warp_lanes = true, aa.window = c.window;
  aa.sinks = c.sinks ? dsinks.as<float>() : nullptr;
  Workspace ws(attention_workspace_bytes(S, c.n_head, D, *std::max_element(c.lengths.begin(), c.lengths.end()) + 1));

  // One launch per sequence.
  DeviceBuffer q_one(static_cast<size_t>(S) * Q * sizeof(float)), out_one(q_one.bytes());
  for (int s = 0; s < S; ++s) {
    AttnPrepArgs one = pa;
    one.q_src += static_cast<size_t>(s) * pa.q_stride, one.k_src += static_cast<size_t>(s) * pa.k_stride;
    one.v_src += static_cast<size_t>(s) * pa.v_stride;
    one.n_tokens = 1, one.pos0 = c.lengths[s], one.q_out = q_one.as<float>() + static_cast<size_t>(s) * Q;
    one.k_cache = k_one[s].as<uint8_t>(), one.v_cache = v_one[s].as<uint8_t>();
    attn_prep(one, nullptr);
    AttentionArgs a = aa;
    a.q = one.q_out, a.out = out_one.as<float>() + static_cast<size_t>(s) * Q, a.n_tokens = 1, a.pos0 = c.lengths[s];
    a.k_cache = k_one[s].as<uint8_t>(), a.v_cache = v_one[s].as<uint8_t>();
    ws.reset();
    attention(a, ws, nullptr);
    MT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // All in one launch each.
  std::vector<SeqKvRow> table(S);
  uint32_t max_n_kv = 0;
  for (int s = 0; s < S; ++s) {
    table[s].k = k_all[s].as<uint8_t>(), table[s].v = v_all[s].as<uint8_t>(), table[s].n_kv = c.lengths[s] + 1;
    max_n_kv = std::max(max_n_kv, table[s].n_kv);
  }
  DeviceBuffer dtable = to_device(table), q_all(q_one.bytes()), out_all(q_one.bytes());
  const size_t row = static_cast<size_t>(Q);
  DeviceBuffer qs(S * row), qm(S * row / 32 * sizeof(uint2));
  AttnPrepArgs all = pa;
  all.n_tokens = S, all.q_out = q_all.as<float>(), all.seq_rows = dtable.as<SeqKvRow>();
  attn_prep(all, nullptr);
  AttentionArgs a = aa;
  a.q = q_all.as<float>(), a.out = out_all.as<float>(), a.n_tokens = S;
  a.k_cache = k_all[0].as<uint8_t>(), a.v_cache = v_all[0].as<uint8_t>();
  a.seq_rows = dtable.as<SeqKvRow>(), a.max_n_kv = max_n_kv;
  a.quant_qs = qs.as<int8_t>(), a.quant_meta = qm.as<uint2>(), a.quant_mode = ActQuant::kQ8_0;
  ws.reset();
  const bool quantized = attention(a, ws, nullptr);
  MT_CUDA_CHECK(cudaDeviceSynchronize());

  for (int s = 0; s < S; ++s) {
    const size_t n = (c.lengths[s] + 1) * rb;
    EXPECT_TRUE(to_host<uint8_t>(k_all[s], n) == to_host<uint8_t>(k_one[s], n)) << "K rows of sequence " << s;
    EXPECT_TRUE(to_host<uint8_t>(v_all[s], n) == to_host<uint8_t>(v_one[s], n)) << "V rows of sequence " << s;
  }
  EXPECT_TRUE(to_host<float>(q_all, S * row) == to_host<float>(q_one, S * row)) << "roped queries";
  const std::vector<float> got = to_host<float>(out_all, S * row), want = to_host<float>(out_one, S * row);
  for (int s = 0; s < S; ++s) {
    float scale = 0, diff = 0;
    for (size_t e = 0; e < row; ++e) {
      scale = std::max(scale, std::fabs(want[s * row + e]));
      diff = std::max(diff, std::fabs(got[s * row + e] - want[s * row + e]));
    }
    EXPECT_LE(diff, 1e-5f * scale + 1e-7f) << "sequence " << s << " (length " << c.lengths[s] << ")";
  }
  if (quantized) {  // wo's rows as quantize_act of the output
    DeviceBuffer wq(S * row), wm(S * row / 32 * sizeof(uint2));
    quantize_act(out_all.as<float>(), S, static_cast<int>(row), ActQuant::kQ8_0, wq.as<int8_t>(), wm.as<uint2>(), nullptr);
    EXPECT_TRUE(to_host<int8_t>(qs, S * row) == to_host<int8_t>(wq, S * row));
    EXPECT_TRUE(to_host<uint64_t>(qm, S * row / 32) == to_host<uint64_t>(wm, S * row / 32));
  }
}

TEST(CudaAttentionSeqs, SeveralSequencesInOneLaunchEqualALaunchEach) {
  MT_SKIP_WITHOUT_DEVICE();
  uint32_t seed = 7000;
  const std::vector<uint32_t> short_seqs = {0, 5, 31, 32, 100, 255};
  std::vector<uint32_t> many;
  for (uint32_t i = 0; i < 40; ++i) many.push_back((i * 97) % 1500);
  for (QuantType type : {QuantType::F16, QuantType::Q8_0, QuantType::F32}) {
    for (int D : {64, 128}) {
      for (uint32_t warp_max : {0u, 4096u}) {
        check_case({type, D, 8, 2, short_seqs, warp_max}, ++seed);
        check_case({type, D, 16, 4, many, warp_max}, ++seed);  // several chunks for the long ones
      }
    }
  }
  check_case({QuantType::F16, 64, 8, 8, short_seqs, 4096, 32, true}, ++seed);  // a window and sinks (gpt-oss)
  check_case({QuantType::F16, 256, 4, 1, {3, 700, 64}, 4096}, ++seed);         // head_dim 256, MQA
  std::vector<uint32_t> full(kAttnDecodeMaxSeqTokens);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<uint32_t>(i * 13);
  check_case({QuantType::Q8_0, 128, 32, 4, full, 4096}, ++seed);  // the most tokens one launch takes
}

}  // namespace
}  // namespace mt::cuda
