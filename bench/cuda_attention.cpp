// moetier_cuda_attention: causal prefill attention over an F16 KV cache, the f32
// CUDA-core kernel against the tensor-core one (attention()'s block shape and both pinned
// shapes: 64 and 128 query rows per block), one prompt of n_tokens at pos0 = 0 per call.
//
// Shapes default to Qwen3-30B-A3B (32 query heads, 4 KV heads, head_dim 128); --tokens
// lists the prompt lengths (default 512, 2048, 4096). Rates count the two matrix products
// over the causal half: 4 * n_tokens^2 / 2 * n_head * head_dim FLOP. Each figure is the
// median over --reps timings (CUDA events) of a batch of back-to-back calls, per call,
// after a warm-up call; a batch holds (4096 / n_tokens)^2 calls (at least one), so short
// prompts are timed over as much work as a 4096-token one and the launches queue ahead
// of the GPU instead of their host overhead being timed. The last
// column is the kernel's largest difference from the f32 kernel, relative to the largest
// |output| (a sanity check, not the accuracy test: tests/cuda/attention_tc_test.cpp).
//
// --decode: one query token at position n_kv - 1 for each --kv length, as a decode graph
// calls it (the position read on the device, the split sized for n_kv rounded up to the
// graph's 256-position span), the grouped split-K kernel and its merge launch against the
// warps kernel (AttentionArgs warp_max) and its lanes form (warp_lanes), us per call over
// 200 back-to-back calls.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/device.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/ops_attention_tc.cuh"
#include "quant/types.h"

namespace {

using mt::QuantType;
using mt::cuda::DeviceBuffer;
using mt::cuda::PrefillKernel;

struct Flags {
  std::vector<int> tokens = {512, 2048, 4096};
  bool decode = false;
  std::vector<int> kv = {8, 64, 128, 256, 512, 1024, 2048, 4096};
  int n_head = 32, n_head_kv = 4, head_dim = 128;
  int reps = 20;
};

// Median milliseconds per call of fn(stream): `reps` timings of `calls` back-to-back
// calls each, after one warm-up call.
template <class Fn>
double median_ms(int reps, int calls, cudaStream_t stream, Fn fn) {
  fn(stream);
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<size_t>(reps));
  for (float& m : ms) {
    MT_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < calls; ++i) fn(stream);
    MT_CUDA_CHECK(cudaEventRecord(stop, stream));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    MT_CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[static_cast<size_t>(reps / 2)] / calls;
}

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

DeviceBuffer upload(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float));
  MT_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

std::vector<float> download(const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  MT_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// max |a - b| / max |b|.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, mag = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
  }
  return mag > 0.0 ? diff / mag : diff;
}

const char* kernel_name(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kSimt: return "f32 (CUDA cores)";
    case PrefillKernel::kTensorCore: return "tensor cores (attention())";
    case PrefillKernel::kTensorCore64Rows: return "tensor cores, 64-row blocks";
    case PrefillKernel::kTensorCore128Rows: return "tensor cores, 128-row blocks";
  }
  return "?";
}

// One call's device inputs: q (n_query, n_head, head_dim) and an F16 cache of cache_rows
// rows whose first n_kv hold random K / V rows, with the AttentionArgs over them (pos0 0).
struct AttnInputs {
  size_t q_elems;
  DeviceBuffer q, k_cache, v_cache, out;
  mt::cuda::AttentionArgs args;
};

AttnInputs make_inputs(const Flags& f, int n_query, int n_kv, size_t cache_rows, std::mt19937& rng,
                       cudaStream_t stream) {
  const int D = f.head_dim, kv_dim = f.n_head_kv * D;
  const uint64_t row_bytes = *mt::row_bytes(QuantType::F16, static_cast<uint64_t>(kv_dim));
  const size_t q_elems = static_cast<size_t>(n_query) * f.n_head * D;
  AttnInputs in{q_elems, upload(randn(q_elems, rng)), DeviceBuffer(cache_rows * row_bytes),
                DeviceBuffer(cache_rows * row_bytes), DeviceBuffer(q_elems * sizeof(float)), {}};
  for (DeviceBuffer* cache : {&in.k_cache, &in.v_cache}) {
    DeviceBuffer rows = upload(randn(static_cast<size_t>(n_kv) * kv_dim, rng));
    mt::cuda::kv_store(QuantType::F16, rows.as<float>(), n_kv, kv_dim, cache->as<uint8_t>(), row_bytes, 0, stream);
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));  // (before rows is freed)
  }
  mt::cuda::AttentionArgs& a = in.args;
  a.q = in.q.as<float>();
  a.k_cache = in.k_cache.as<uint8_t>();
  a.v_cache = in.v_cache.as<uint8_t>();
  a.kv_type = QuantType::F16;
  a.kv_row_bytes = row_bytes;
  a.n_tokens = n_query;
  a.n_head = f.n_head;
  a.n_head_kv = f.n_head_kv;
  a.head_dim = D;
  a.out = in.out.as<float>();
  return in;
}

void bench_tokens(const Flags& f, int T, std::mt19937& rng, cudaStream_t stream) {
  AttnInputs in = make_inputs(f, T, T, static_cast<size_t>(T), rng, stream);
  const mt::cuda::AttentionArgs& a = in.args;
  const double flop = 4.0 * static_cast<double>(T) * T / 2.0 * f.n_head * f.head_dim;
  const int calls = std::max(1, (4096 / T) * (4096 / T));

  std::vector<float> simt_out;
  for (PrefillKernel k : {PrefillKernel::kSimt, PrefillKernel::kTensorCore, PrefillKernel::kTensorCore64Rows,
                          PrefillKernel::kTensorCore128Rows}) {
    if (k != PrefillKernel::kSimt && !mt::cuda::attention_prefill_tc_fits(a)) {
      std::printf("| %d | %s | - | - | does not fit |\n", T, kernel_name(k));
      continue;
    }
    const double ms =
        median_ms(f.reps, calls, stream, [&](cudaStream_t s) { mt::cuda::attention_prefill_with(k, a, s); });
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = download(in.out, in.q_elems);
    if (k == PrefillKernel::kSimt) simt_out = got;
    std::printf("| %d | %s | %.3f | %.1f | %.1e |\n", T, kernel_name(k), ms, flop / (ms * 1e-3) / 1e12,
                relative_diff(got, simt_out));
    std::fflush(stdout);
  }
}

void bench_decode(const Flags& f, int n_kv, std::mt19937& rng, cudaStream_t stream) {
  const uint32_t cap = (static_cast<uint32_t>(n_kv) + 255) / 256 * 256;
  AttnInputs in = make_inputs(f, 1, n_kv, cap, rng, stream);
  const uint32_t pos = static_cast<uint32_t>(n_kv - 1);
  DeviceBuffer pos_dev(sizeof(uint32_t));
  MT_CUDA_CHECK(cudaMemcpy(pos_dev.get(), &pos, sizeof(pos), cudaMemcpyHostToDevice));
  mt::cuda::Workspace ws(mt::cuda::attention_workspace_bytes(1, f.n_head, f.head_dim, cap));
  mt::cuda::AttentionArgs& a = in.args;
  a.pos_dev = pos_dev.as<uint32_t>();
  a.n_kv_cap = cap;
  std::vector<float> grouped;
  for (int kernel = 0; kernel < 3; ++kernel) {  // grouped, warps, warps' lanes form
    const uint32_t warp_max = kernel == 0 ? 0u : cap;
    a.warp_max = warp_max;
    a.warp_lanes = kernel == 2;
    const double ms = median_ms(f.reps, 200, stream, [&](cudaStream_t s) {
      const size_t mark = ws.mark();
      mt::cuda::attention(a, ws, s);
      ws.rewind(mark);
    });
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = download(in.out, in.q_elems);
    if (warp_max == 0) grouped = got;
    const char* name = kernel == 0 ? "grouped + merge" : kernel == 1 ? "warps" : "warps, lanes";
    std::printf("| %d | %u | %s | %.2f | %.1e |\n", n_kv, cap, name, ms * 1e3,
                relative_diff(got, grouped));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"moetier_cuda_attention: causal prefill attention, f32 vs tensor-core kernels, F16 KV cache"};
  app.add_option("--tokens", f.tokens, "prompt lengths (default 512 2048 4096)")->check(CLI::Range(1, 1 << 17));
  app.add_option("--heads", f.n_head, "query heads (default 32)")->check(CLI::Range(1, 1024));
  app.add_option("--kv-heads", f.n_head_kv, "KV heads (default 4)")->check(CLI::Range(1, 1024));
  app.add_option("--head-dim", f.head_dim, "head_dim (default 128)")->check(CLI::Range(1, 256));
  app.add_option("--reps", f.reps, "timed calls per figure (default 20)")->check(CLI::Range(1, 10000));
  app.add_flag("--decode", f.decode, "decode attention (one token) over the --kv lengths instead");
  app.add_option("--kv", f.kv, "decode context lengths (default 8 64 128 256 512 1024 2048 4096)")
      ->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  if (f.n_head % f.n_head_kv != 0) {
    std::fprintf(stderr, "moetier_cuda_attention: --heads must be a multiple of --kv-heads\n");
    return 1;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "moetier_cuda_attention: %s\n", mt::cuda::describe_devices().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  cudaStream_t stream;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (f.decode) {
    std::printf("moetier_cuda_attention --decode: %s, heads %d / kv heads %d, head_dim %d, F16 cache, median of %d\n",
                mt::cuda::describe_devices().c_str(), f.n_head, f.n_head_kv, f.head_dim, f.reps);
    std::printf("| n_kv | split sized for | kernel | us per call | max diff vs grouped |\n");
    std::printf("| ---: | ---: | --- | ---: | ---: |\n");
    for (int n_kv : f.kv) bench_decode(f, n_kv, rng, stream);
    MT_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  }
  std::printf("moetier_cuda_attention: %s, heads %d / kv heads %d, head_dim %d, causal, pos0 0, median of %d\n",
              mt::cuda::describe_devices().c_str(), f.n_head, f.n_head_kv, f.head_dim, f.reps);
  std::printf("| n_tokens | kernel | ms | TFLOP/s | max diff vs f32 |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: |\n");
  for (int T : f.tokens) bench_tokens(f, T, rng, stream);
  MT_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
