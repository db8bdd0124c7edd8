// The tensor-core prefill attention (cuda/kernels/ops_attention_tc.cu, blocks of 64 and of 128
// rows) on random q over F16 caches filled by the CPU's KvCache, for n_tokens {17, 64, 200, 512, 1024} x pos0
// {0, 37, 300} x GQA groups {1, 4, 8} x head_dim {64, 128, 256}, against three references:
//  * exact: a causal softmax in double over the cached rows, q as given (f32);
//  * cpu: model/attention.cpp's arithmetic for an F16 cache (attend_tile: q rounded to
//    f16, scores scaled in f32, mt::softmax, the probabilities rounded to f16, V summed),
//    in double where the CPU's order of f32 sums is not the point;
//  * f32 kernel: today's CUDA-core prefill kernel (PrefillKernel::kSimt), every row.
// The references see a sample of tokens (the first and last 32, every 13th between) and
// heads (the first, a middle and the last); the f32 kernel every row. Also: a prompt run
// in chunks (pos0 > 0) equals the matching rows of one run, and attention() takes the
// tensor cores exactly where attention_prefill_tc_fits says.
//
// Tolerances. Past the cache's own halves the kernel rounds q and each softmax numerator
// p to f16 (relative 2^-11 = 4.9e-4 per value, independent, of either sign); the rest is
// f32. A wrong element, mask or rescale errs by order 1.
//  * Against the CPU arithmetic, which rounds the same q: per (token, head) row, max
//    |diff| <= 2e-3 * max |ref| of the row. What differs is the rounding of p (the CPU
//    rounds normalised probabilities): weight errors delta_j move the output by sum_j
//    w_j (delta_j - mean delta) v_j, on random data about 2^-11 sqrt(sum_j w_j^2 v_j^2),
//    while the row's largest output is about 3 sqrt(sum_j w_j^2) (the largest of D
//    normals): a few 1e-4 of it.
//  * Against the exact softmax and the f32 kernel (q unrounded) the q rounding adds:
//    each score moves by about 2^-11 |q . k| scale / sqrt(3), ~4e-4 for q ~ N(0, 1.5^2),
//    and a row whose weight two or three positions share moves by w1 w2 (ds1 - ds2)
//    (v1 - v2), ~1e-3 of its largest output in the worst of thousands of rows. Asserted:
//    max |diff| <= 2e-3 * max |out| over the call, and <= 5e-3 * max |ref| per row.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <vector>

#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_attention_tc.cuh"
#include "cuda_test_util.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "quant/fp16.h"

namespace mt::cuda {
namespace {

using test::to_device;
using test::to_host;

constexpr double kTol = 2e-3;     // per row, same rounding of q; over the call, any reference
constexpr double kRowTol = 5e-3;  // per row, against q unrounded

struct Shape {
  int D = 0, T = 0;
  uint32_t pos0 = 0;
  int n_head = 0, n_head_kv = 0;
  int group() const { return n_head / n_head_kv; }
  int kv_dim() const { return n_head_kv * D; }
  uint32_t n_kv() const { return pos0 + static_cast<uint32_t>(T); }
};

// A random F16 cache of n_kv() positions (rows N(0, 1) stored by KvCache) and q (T,
// n_head, D) ~ N(0, q_scale^2): host copies (the cache widened, exactly) and device ones.
struct Problem {
  Shape s;
  std::vector<float> q, k, v;  // q (T, n_head, D); k, v (n_kv, kv_dim)
  uint64_t row_bytes = 0;
  DeviceBuffer dq, dk, dv;
};

Problem make_problem(const Shape& s, uint32_t seed, float q_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Problem p;
  p.s = s;
  const int kv_dim = s.kv_dim();
  auto cache = KvCache::create(1, s.n_kv(), static_cast<uint32_t>(kv_dim), QuantType::F16);
  MT_CHECK(cache.ok());
  std::vector<float> kr(static_cast<size_t>(kv_dim)), vr(kr.size());
  for (uint32_t pos = 0; pos < s.n_kv(); ++pos) {
    for (float& x : kr) x = dist(rng);
    for (float& x : vr) x = dist(rng);
    cache->store(0, pos, kr.data(), vr.data());
  }
  p.q.resize(static_cast<size_t>(s.T) * s.n_head * s.D);
  for (float& x : p.q) x = q_scale * dist(rng);
  p.row_bytes = cache->row_bytes();
  const size_t cache_bytes = s.n_kv() * p.row_bytes;
  p.k.resize(static_cast<size_t>(s.n_kv()) * kv_dim);
  p.v.resize(p.k.size());
  for (uint32_t pos = 0; pos < s.n_kv(); ++pos) {
    cache->load_k(0, pos, &p.k[static_cast<size_t>(pos) * kv_dim]);
    cache->load_v(0, pos, &p.v[static_cast<size_t>(pos) * kv_dim]);
  }
  p.dq = to_device(p.q);
  p.dk = to_device(std::vector<uint8_t>(cache->k_row(0, 0), cache->k_row(0, 0) + cache_bytes));
  p.dv = to_device(std::vector<uint8_t>(cache->v_row(0, 0), cache->v_row(0, 0) + cache_bytes));
  return p;
}

// attention() arguments for tokens [t0, t0 + n) of the problem's q (positions pos0 + t0
// ..), writing out rows [t0, t0 + n) of `out` (T, n_head * D).
AttentionArgs args_for(const Problem& p, int t0, int n, float* out) {
  const Shape& s = p.s;
  const size_t row = static_cast<size_t>(s.n_head) * s.D;
  AttentionArgs a;
  a.q = p.dq.as<float>() + t0 * row;
  a.k_cache = p.dk.as<uint8_t>();
  a.v_cache = p.dv.as<uint8_t>();
  a.kv_type = QuantType::F16;
  a.kv_row_bytes = p.row_bytes;
  a.n_tokens = n;
  a.n_head = s.n_head;
  a.n_head_kv = s.n_head_kv;
  a.head_dim = s.D;
  a.pos0 = s.pos0 + static_cast<uint32_t>(t0);
  a.out = out + t0 * row;
  return a;
}

std::vector<float> run(PrefillKernel kernel, const Problem& p) {
  DeviceBuffer out(p.q.size() * sizeof(float));
  attention_prefill_with(kernel, args_for(p, 0, p.s.T, out.as<float>()), nullptr);
  MT_CUDA_CHECK(cudaGetLastError());
  return to_host<float>(out, p.q.size());
}

// Row (token t, head h) of the exact and the CPU-arithmetic references.
void reference_row(const Problem& p, int t, int h, std::vector<double>& exact, std::vector<double>& cpu) {
  const Shape& s = p.s;
  const int D = s.D, kv_dim = s.kv_dim();
  const size_t off = static_cast<size_t>(h / s.group()) * D;
  const float* q = &p.q[(static_cast<size_t>(t) * s.n_head + h) * D];
  std::vector<float> qh(static_cast<size_t>(D));
  for (int e = 0; e < D; ++e) qh[e] = fp16_to_fp32(fp32_to_fp16(q[e]));
  const uint32_t len = s.pos0 + static_cast<uint32_t>(t) + 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(D));  // model/attention.cpp's
  std::vector<double> se(len);
  std::vector<float> sc(len);
  double mx = -INFINITY;
  for (uint32_t j = 0; j < len; ++j) {
    const float* k = &p.k[j * static_cast<size_t>(kv_dim) + off];
    double dot = 0.0, dot_h = 0.0;
    for (int e = 0; e < D; ++e) {
      dot += static_cast<double>(q[e]) * k[e];
      dot_h += static_cast<double>(qh[e]) * k[e];
    }
    se[j] = dot * scale;
    sc[j] = static_cast<float>(dot_h) * kq_scale;
    mx = std::max(mx, se[j]);
  }
  double sum = 0.0;
  for (uint32_t j = 0; j < len; ++j) sum += (se[j] = std::exp(se[j] - mx));
  softmax(sc.data(), len);
  exact.assign(static_cast<size_t>(D), 0.0);
  cpu.assign(static_cast<size_t>(D), 0.0);
  for (uint32_t j = 0; j < len; ++j) {
    const float* v = &p.v[j * static_cast<size_t>(kv_dim) + off];
    const double w = se[j] / sum;
    const double w_h = fp16_to_fp32(fp32_to_fp16(sc[j]));
    for (int e = 0; e < D; ++e) {
      exact[e] += w * v[e];
      cpu[e] += w_h * v[e];
    }
  }
}

// max |got - ref| / max |ref| over one row of D (ref all zero: the absolute error).
template <class A, class B>
double row_error(const A* got, const B* ref, int D) {
  double err = 0.0, mag = 0.0;
  for (int e = 0; e < D; ++e) {
    const double g = got[e], r = ref[e];
    err = std::max(err, std::isfinite(g) ? std::fabs(g - r) : INFINITY);
    mag = std::max(mag, std::fabs(r));
  }
  return mag > 0.0 ? err / mag : err;
}

std::vector<int> sample_tokens(int T) {
  std::vector<int> ts;
  for (int t = 0; t < T; ++t) {
    if (t < 32 || t >= T - 32 || t % 13 == 0) ts.push_back(t);
  }
  return ts;
}

std::vector<int> sample_heads(int n_head) {
  std::vector<int> hs = {0, n_head / 2, n_head - 1};
  hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
  return hs;
}

// Worst errors: per row (of the row's max |ref|) and over the call (of the call's).
struct Errors {
  double exact = 0, cpu = 0, f32_kernel = 0, f32_kernel_exact = 0;  // per row
  double exact_call = 0, f32_kernel_call = 0;                        // over the call
};

// max |diff| and max |ref| over rows, for an error relative to the call's largest output.
struct CallError {
  double diff = 0, mag = 0;
  template <class A, class B>
  void add(const A* got, const B* ref, int D) {
    for (int e = 0; e < D; ++e) {
      const double g = got[e], r = ref[e];
      diff = std::max(diff, std::isfinite(g) ? std::fabs(g - r) : INFINITY);
      mag = std::max(mag, std::fabs(r));
    }
  }
  double relative() const { return mag > 0.0 ? diff / mag : diff; }
};

constexpr PrefillKernel kBlockShapes[] = {PrefillKernel::kTensorCore64Rows, PrefillKernel::kTensorCore128Rows};

// The tensor-core kernel (both block shapes) against the references and the f32 kernel.
Errors measure(const Problem& p) {
  const Shape& s = p.s;
  std::vector<std::vector<float>> tcs;
  for (PrefillKernel k : kBlockShapes) tcs.push_back(run(k, p));
  const std::vector<float> f32 = run(PrefillKernel::kSimt, p);
  Errors e;
  const size_t n_rows = static_cast<size_t>(s.T) * s.n_head;
  for (const std::vector<float>& tc : tcs) {
    CallError call;
    for (size_t r = 0; r < n_rows; ++r) {
      e.f32_kernel = std::max(e.f32_kernel, row_error(&tc[r * s.D], &f32[r * s.D], s.D));
      call.add(&tc[r * s.D], &f32[r * s.D], s.D);
    }
    e.f32_kernel_call = std::max(e.f32_kernel_call, call.relative());
  }
  std::vector<double> exact, cpu;
  std::vector<CallError> exact_call(tcs.size());
  for (int t : sample_tokens(s.T)) {
    for (int h : sample_heads(s.n_head)) {
      reference_row(p, t, h, exact, cpu);
      const size_t at = (static_cast<size_t>(t) * s.n_head + h) * s.D;
      for (size_t i = 0; i < tcs.size(); ++i) {
        e.exact = std::max(e.exact, row_error(&tcs[i][at], exact.data(), s.D));
        e.cpu = std::max(e.cpu, row_error(&tcs[i][at], cpu.data(), s.D));
        exact_call[i].add(&tcs[i][at], exact.data(), s.D);
      }
      e.f32_kernel_exact = std::max(e.f32_kernel_exact, row_error(&f32[at], exact.data(), s.D));
    }
  }
  for (const CallError& c : exact_call) e.exact_call = std::max(e.exact_call, c.relative());
  return e;
}

bool device_has_tensor_core_path() {
  int dev = 0, major = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

#define MT_SKIP_WITHOUT_TENSOR_CORE_PATH()                                                \
  do {                                                                                    \
    MT_SKIP_WITHOUT_DEVICE();                                                             \
    if (!device_has_tensor_core_path()) GTEST_SKIP() << "the device is older than sm_80"; \
  } while (0)

class CudaAttentionTc : public ::testing::TestWithParam<int> {};

TEST_P(CudaAttentionTc, MatchesReferences) {
  MT_SKIP_WITHOUT_TENSOR_CORE_PATH();
  const int D = GetParam();
  uint32_t seed = 1000u * static_cast<uint32_t>(D);
  Errors worst;
  for (int T : {17, 64, 200, 512, 1024}) {
    for (uint32_t pos0 : {0u, 37u, 300u}) {
      for (int group : {1, 4, 8}) {
        const Shape s{D, T, pos0, 2 * group, 2};
        SCOPED_TRACE(::testing::Message() << "head_dim " << D << " n_tokens " << T << " pos0 " << pos0 << " group "
                                          << group);
        const Errors e = measure(make_problem(s, ++seed, 1.5f));
        EXPECT_LE(e.cpu, kTol);
        EXPECT_LE(e.exact_call, kTol);
        EXPECT_LE(e.f32_kernel_call, kTol);
        EXPECT_LE(e.exact, kRowTol);
        EXPECT_LE(e.f32_kernel, kRowTol);
        worst.exact = std::max(worst.exact, e.exact);
        worst.cpu = std::max(worst.cpu, e.cpu);
        worst.f32_kernel = std::max(worst.f32_kernel, e.f32_kernel);
        worst.f32_kernel_exact = std::max(worst.f32_kernel_exact, e.f32_kernel_exact);
        worst.exact_call = std::max(worst.exact_call, e.exact_call);
        worst.f32_kernel_call = std::max(worst.f32_kernel_call, e.f32_kernel_call);
      }
    }
  }
  std::printf("head_dim %d, tensor cores, worst row error (of the row's max |out|): vs cpu %.2e, vs exact %.2e, vs "
              "f32 kernel %.2e; over a call (of its max |out|): vs exact %.2e, vs f32 kernel %.2e; f32 kernel vs "
              "exact per row %.2e\n",
              D, worst.cpu, worst.exact, worst.f32_kernel, worst.exact_call, worst.f32_kernel_call,
              worst.f32_kernel_exact);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionTc, ::testing::Values(64, 128, 256));

// Peaked softmax (q ~ N(0, 6^2): logits of std ~6, a few positions take nearly all the
// weight, the running max jumps late). Against the CPU arithmetic (same q rounding) the
// usual tolerance; against the exact softmax the q rounding grows with |q| (scores move
// by ~2e-3, weights shared by close scores by as much): 1e-2 per row.
TEST(CudaAttentionTcPeaked, MatchesReferences) {
  MT_SKIP_WITHOUT_TENSOR_CORE_PATH();
  for (int D : {64, 128, 256}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << D);
    const Errors e = measure(make_problem(Shape{D, 200, 37, 16, 2}, 7u + static_cast<uint32_t>(D), 6.0f));
    EXPECT_LE(e.cpu, kTol);
    EXPECT_LE(e.exact, 1e-2);
    std::printf("peaked, head_dim %d: vs exact %.2e, vs cpu %.2e, vs f32 kernel %.2e\n", D, e.exact, e.cpu,
                e.f32_kernel);
  }
}

// A prompt evaluated in chunks (the later ones at pos0 > 0, over the cache the earlier
// ones filled) gives the rows of a single run. Each row's arithmetic does not depend on
// its neighbours or on the tiles wholly past it (they leave its state unchanged), so
// the rows should even be bit-equal; asserted: the tolerance.
TEST(CudaAttentionTcChunks, ChunkedPromptMatchesSingleRun) {
  MT_SKIP_WITHOUT_TENSOR_CORE_PATH();
  const int T = 300;
  const int bounds[] = {0, 100, 137, 230, 299, 300};  // chunks of 100, 37, 93, 69 and 1 tokens
  for (int D : {64, 128, 256}) {
    for (int group : {1, 8}) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << D << " group " << group);
      const Problem p = make_problem(Shape{D, T, 0, 2 * group, 2}, 50u + static_cast<uint32_t>(D + group), 1.5f);
      for (PrefillKernel k : kBlockShapes) {
        const std::vector<float> single = run(k, p);
        DeviceBuffer out(p.q.size() * sizeof(float));
        for (size_t c = 0; c + 1 < std::size(bounds); ++c) {
          attention_prefill_with(k, args_for(p, bounds[c], bounds[c + 1] - bounds[c], out.as<float>()), nullptr);
        }
        const std::vector<float> chunked = to_host<float>(out, p.q.size());
        double worst = 0.0;
        size_t equal_rows = 0;
        const size_t n_rows = static_cast<size_t>(T) * p.s.n_head;
        for (size_t r = 0; r < n_rows; ++r) {
          const float* a = &chunked[r * D];
          const float* b = &single[r * D];
          worst = std::max(worst, row_error(a, b, D));
          equal_rows += std::equal(a, a + D, b) ? 1 : 0;
        }
        EXPECT_LE(worst, kTol) << (k == PrefillKernel::kTensorCore64Rows ? "64" : "128") << "-row blocks";
        std::printf("chunks, head_dim %d group %d, %s-row blocks: worst row error %.2e, %zu of %zu rows bit-equal\n",
                    D, group, k == PrefillKernel::kTensorCore64Rows ? "64" : "128", worst, equal_rows, n_rows);
      }
    }
  }
}

// attention_prefill_tc_fits: F16 caches with head_dim 64, 128, 256 only; attention()
// (n_tokens past the decode limit) then gives the tensor-core kernel's bits, elsewhere
// the f32 kernel's.
TEST(CudaAttentionTcDispatch, TensorCoresWhereTheyFit) {
  MT_SKIP_WITHOUT_TENSOR_CORE_PATH();
  const Problem p = make_problem(Shape{128, 40, 5, 8, 2}, 3, 1.5f);
  DeviceBuffer out(p.q.size() * sizeof(float));
  AttentionArgs a = args_for(p, 0, p.s.T, out.as<float>());
  EXPECT_TRUE(attention_prefill_tc_fits(a));
  Workspace ws(attention_workspace_bytes(a.n_tokens, a.n_head, a.head_dim, p.s.n_kv()));
  attention(a, ws, nullptr);
  const std::vector<float> dispatched = to_host<float>(out, p.q.size());
  EXPECT_TRUE(dispatched == run(PrefillKernel::kTensorCore, p));

  for (int D : {64, 256}) {
    a.head_dim = D;  // the fit depends on the shape and alignment only
    a.kv_row_bytes = static_cast<uint64_t>(2 * D * a.n_head_kv);
    EXPECT_TRUE(attention_prefill_tc_fits(a)) << "head_dim " << D;
  }
  a.head_dim = 128;
  a.kv_type = QuantType::Q8_0;
  a.kv_row_bytes = *mt::row_bytes(QuantType::Q8_0, 128) * 2;
  EXPECT_FALSE(attention_prefill_tc_fits(a));
  a.kv_type = QuantType::F32;
  a.kv_row_bytes = 128 * 4 * 2;
  EXPECT_FALSE(attention_prefill_tc_fits(a));
  a.kv_type = QuantType::F16;
  for (int D : {32, 80, 96, 192}) {
    a.head_dim = D;
    a.kv_row_bytes = static_cast<uint64_t>(2 * D * a.n_head_kv);
    EXPECT_FALSE(attention_prefill_tc_fits(a)) << "head_dim " << D;
  }
  a.head_dim = 128;
  a.kv_row_bytes = p.row_bytes + 8;  // rows not 16-byte aligned
  EXPECT_FALSE(attention_prefill_tc_fits(a));

  // head_dim 80 (F16) through attention(): the f32 kernel's bits.
  const Problem p80 = make_problem(Shape{80, 40, 5, 8, 2}, 4, 1.5f);
  DeviceBuffer out80(p80.q.size() * sizeof(float));
  attention(args_for(p80, 0, p80.s.T, out80.as<float>()), ws, nullptr);
  EXPECT_TRUE(to_host<float>(out80, p80.q.size()) == run(PrefillKernel::kSimt, p80));
}

}  // namespace
}  // namespace mt::cuda
