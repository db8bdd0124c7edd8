// Decode attention's fused launches against the unfused ops they replace: attn_prep =
// add_bias + per-head rms_norm + rope + kv_store, byte for byte (every cache type, both
// RoPE styles, stacked and separate Q/K/V rows, the position from the host or from device
// memory); the position read on the device with a split sized for a larger capacity = the
// host-position call within float reordering.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "cuda/kernels/ops.h"
#include "cuda_test_util.h"
#include "quant/reference.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::randn;
using test::to_host;

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A (n_ctx, kv_dim) K and V cache of random rows in `kv`, stored as kv_store stores them,
// and the AttentionArgs of a decode call over it (the position from the host, or from the
// device with the split sized for the whole cache).
struct RandomKvCache {
  QuantType kv;
  int kv_dim;
  uint32_t n_ctx;
  uint64_t rb;
  DeviceBuffer k, v;
  RandomKvCache(QuantType type, int dim, uint32_t ctx, std::mt19937& rng)
      : kv(type), kv_dim(dim), n_ctx(ctx), rb(*row_bytes(type, static_cast<uint64_t>(dim))), k(rb * ctx), v(rb * ctx) {
    for (DeviceBuffer* dst : {&k, &v}) {
      const DeviceBuffer rows = to_device(randn(static_cast<size_t>(ctx) * dim, rng));
      kv_store(kv, rows.as<float>(), static_cast<int>(ctx), dim, dst->as<uint8_t>(), rb, 0, nullptr);
    }
  }
  AttentionArgs decode_args(const float* q, int T, int H, int D, uint32_t pos0, const uint32_t* pos_dev) const {
    AttentionArgs a;
    a.q = q, a.k_cache = k.as<uint8_t>(), a.v_cache = v.as<uint8_t>();
    a.kv_type = kv, a.kv_row_bytes = rb;
    a.n_tokens = T, a.n_head = H, a.n_head_kv = kv_dim / D, a.head_dim = D;
    a.pos0 = pos_dev != nullptr ? 0 : pos0;
    a.pos_dev = pos_dev;
    a.n_kv_cap = pos_dev != nullptr ? n_ctx : 0;
    return a;
  }
};

struct PrepCase {
  QuantType kv;
  bool neox, bias, norm, stacked, device_pos;
  int n_rot, T;
};

TEST(CudaFused, AttnPrepEqualsBiasNormRopeStore) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  const int H = 8, Hkv = 2, D = 128, n_ctx = 64;
  const int Q = H * D, KV = Hkv * D;
  const float eps = 1e-6f, base = 1e6f, fscale = 1.0f;
  std::vector<PrepCase> cases;
  for (QuantType kv : {QuantType::F16, QuantType::F32, QuantType::Q8_0}) {
    cases.push_back({kv, true, false, true, true, false, D, 1});
    cases.push_back({kv, true, false, true, true, true, D, 1});
    cases.push_back({kv, false, true, false, false, false, D, 5});
    cases.push_back({kv, true, true, true, false, true, 64, 3});
  }
  for (const PrepCase& c : cases) {
    SCOPED_TRACE(testing::Message() << type_name(c.kv) << " neox " << c.neox << " bias " << c.bias << " norm " << c.norm
                                    << " stacked " << c.stacked << " device_pos " << c.device_pos << " n_rot "
                                    << c.n_rot << " T " << c.T);
    const int T = c.T;
    const uint32_t pos0 = 37;
    const std::vector<float> qkv = randn(static_cast<size_t>(T) * (Q + 2 * KV), rng, 2.0f);
    const std::vector<float> bq = randn(Q, rng), bk = randn(KV, rng), bv = randn(KV, rng);
    const std::vector<float> qn = randn(D, rng), kn = randn(D, rng);
    const uint64_t rb = *row_bytes(c.kv, KV);
    // Unfused: split rows, bias, per-head norm, rope, store.
    std::vector<float> q(static_cast<size_t>(T) * Q), k(static_cast<size_t>(T) * KV), v(k.size());
    for (int t = 0; t < T; ++t) {
      const float* r = &qkv[static_cast<size_t>(t) * (Q + 2 * KV)];
      std::copy(r, r + Q, &q[static_cast<size_t>(t) * Q]);
      std::copy(r + Q, r + Q + KV, &k[static_cast<size_t>(t) * KV]);
      std::copy(r + Q + KV, r + Q + 2 * KV, &v[static_cast<size_t>(t) * KV]);
    }
    DeviceBuffer dq = to_device(q), dk = to_device(k), dv = to_device(v);
    DeviceBuffer dbq = to_device(bq), dbk = to_device(bk), dbv = to_device(bv), dqn = to_device(qn), dkn = to_device(kn);
    std::vector<uint8_t> zeros(rb * n_ctx, 0);
    DeviceBuffer kc1 = to_device(zeros), vc1 = to_device(zeros), kc2 = to_device(zeros), vc2 = to_device(zeros);
    if (c.bias) {
      add_bias(dq.as<float>(), dbq.as<float>(), T, Q, nullptr);
      add_bias(dk.as<float>(), dbk.as<float>(), T, KV, nullptr);
      add_bias(dv.as<float>(), dbv.as<float>(), T, KV, nullptr);
    }
    if (c.norm) {
      rms_norm({dq.as<float>(), D, dqn.as<float>(), eps, T * H, D, dq.as<float>(), D}, nullptr);
      rms_norm({dk.as<float>(), D, dkn.as<float>(), eps, T * Hkv, D, dk.as<float>(), D}, nullptr);
    }
    const RopeParams rp{c.n_rot, pos0, base, fscale, c.neox};
    rope(dq.as<float>(), T, H, D, rp, nullptr);
    rope(dk.as<float>(), T, Hkv, D, rp, nullptr);
    kv_store(c.kv, dk.as<float>(), T, KV, kc1.as<uint8_t>(), rb, pos0, nullptr);
    kv_store(c.kv, dv.as<float>(), T, KV, vc1.as<uint8_t>(), rb, pos0, nullptr);

    // Fused.
    DeviceBuffer dqkv = to_device(qkv), dq2(q.size() * sizeof(float));
    const std::vector<uint32_t> pos_word{pos0};
    DeviceBuffer dpos = to_device(pos_word);
    DeviceBuffer sq = to_device(q), sk = to_device(k), sv = to_device(v);  // separate rows
    AttnPrepArgs a;
    if (c.stacked) {
      a.q_src = dqkv.as<float>(), a.k_src = dqkv.as<float>() + Q, a.v_src = dqkv.as<float>() + Q + KV;
      a.q_stride = a.k_stride = a.v_stride = Q + 2 * KV;
    } else {
      a.q_src = sq.as<float>(), a.k_src = sk.as<float>(), a.v_src = sv.as<float>();
      a.q_stride = Q, a.k_stride = a.v_stride = KV;
    }
    if (c.bias) a.bq = dbq.as<float>(), a.bk = dbk.as<float>(), a.bv = dbv.as<float>();
    if (c.norm) a.q_norm = dqn.as<float>(), a.k_norm = dkn.as<float>();
    a.eps = eps;
    a.n_tokens = T, a.n_head = H, a.n_head_kv = Hkv, a.head_dim = D, a.n_rot = c.n_rot;
    a.freq_base = base, a.freq_scale = fscale, a.neox = c.neox;
    a.pos0 = c.device_pos ? 0 : pos0;
    a.pos_dev = c.device_pos ? dpos.as<uint32_t>() : nullptr;
    a.q_out = dq2.as<float>();
    a.k_cache = kc2.as<uint8_t>(), a.v_cache = vc2.as<uint8_t>();
    a.kv_type = c.kv, a.row_bytes = rb;
    attn_prep(a, nullptr);
    EXPECT_TRUE(same_bytes(to_host<float>(dq, q.size()), to_host<float>(dq2, q.size()))) << "q";
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(kc1, zeros.size()), to_host<uint8_t>(kc2, zeros.size()))) << "k cache";
    EXPECT_TRUE(same_bytes(to_host<uint8_t>(vc1, zeros.size()), to_host<uint8_t>(vc2, zeros.size()))) << "v cache";
  }
}

TEST(CudaFused, DecodeAttentionWithTheDevicePositionMatchesTheHostPosition) {
  MT_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(9);
  const int H = 32, Hkv = 4, D = 128, n_ctx = 1024;
  const int KV = Hkv * D;
  const uint64_t rb = *row_bytes(QuantType::F16, KV);
  const std::vector<float> rows = randn(static_cast<size_t>(n_ctx) * KV, rng);
  DeviceBuffer dr = to_device(rows);
  DeviceBuffer kc(rb * n_ctx), vc(rb * n_ctx);
  kv_store(QuantType::F16, dr.as<float>(), n_ctx, KV, kc.as<uint8_t>(), rb, 0, nullptr);
  kv_store(QuantType::F16, dr.as<float>(), n_ctx, KV, vc.as<uint8_t>(), rb, 0, nullptr);
  Workspace ws(attention_workspace_bytes(1, H, D, n_ctx) + (1 << 20));
  for (uint32_t pos : {0u, 5u, 255u, 300u, 1023u}) {
    for (uint32_t cap : {256u, 512u, 1024u}) {
      if (pos + 1 > cap) continue;
      const std::vector<float> q = randn(static_cast<size_t>(H) * D, rng);
      DeviceBuffer dq = to_device(q), o1(q.size() * sizeof(float)), o2(q.size() * sizeof(float));
      const std::vector<uint32_t> pw{pos};
      DeviceBuffer dpos = to_device(pw);
      AttentionArgs a;
      a.q = dq.as<float>(), a.k_cache = kc.as<uint8_t>(), a.v_cache = vc.as<uint8_t>();
      a.kv_type = QuantType::F16, a.kv_row_bytes = rb;
      a.n_tokens = 1, a.n_head = H, a.n_head_kv = Hkv, a.head_dim = D, a.pos0 = pos;
      a.out = o1.as<float>();
      ws.reset();
      attention(a, ws, nullptr);
      const std::vector<float> want = to_host<float>(o1, q.size());
      a.pos0 = 0, a.pos_dev = dpos.as<uint32_t>(), a.n_kv_cap = cap, a.out = o2.as<float>();
      ws.reset();
      attention(a, ws, nullptr);
      const std::vector<float> got = to_host<float>(o2, q.size());
      float scale = 0, diff = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        diff = std::max(diff, std::fabs(want[i] - got[i]));
      }
      EXPECT_LE(diff, 1e-5f * scale) << "pos " << pos << " cap " << cap;
    }
  }
}

}  // namespace
}  // namespace mt::cuda
