// moetier_cuda_mmvq: decode matrix-vector throughput of cuda/kernels/mmvq.h per weight type, as a
// fraction of the device's measured memory bandwidth.
//
// Dense: one matrix of n_in = 4096 columns and as many rows as fit in --mib (default 256
// MiB, several times the L2), X = --tokens rows; the timed call is the whole mmvq()
// (the activation quantization included). Routed (--experts): mmvq_experts over
// Qwen3-30B-A3B expert shapes (2048 -> 768), K = 8 distinct experts per call drawn from
// enough experts to fill --mib, a fresh draw every call. Rates are weight bytes read per
// second (GB = 1e9 bytes). The reference is cudaMemcpyAsync device to device of the same
// byte count, counted as read + write traffic, the practical HBM limit. Calls are
// captured 16 to a CUDA graph (as a decode step runs them, with no launch gaps); each
// figure is the median over --reps graph launches, after one warm-up, per call. Small
// --mib values show a product's fixed cost (the decode step's products are 1-16 MiB).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/check.h"
#include "cuda/kernels/device.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/mmvq.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace {

using mt::QuantType;
using mt::cuda::DeviceBuffer;
using mt::cuda::DeviceMatrix;

struct Flags {
  uint64_t mib = 256;
  int tokens = 1;
  int reps = 20;
  bool experts = false;
  bool json = false;
  std::vector<std::string> types;  // empty: every type
};

constexpr int kCallsPerGraph = 16;

// Median milliseconds per call of fn(i, stream), i = 0..kCallsPerGraph-1 captured into
// one graph, over `reps` timed graph launches after a warm-up launch.
template <class Fn>
double median_ms(int reps, Fn fn) {
  cudaStream_t stream;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) fn(i, stream);
  MT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    MT_CUDA_CHECK(cudaEventRecord(start, stream));
    MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MT_CUDA_CHECK(cudaEventRecord(stop, stream));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms[static_cast<size_t>(i)], start, stop));
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  MT_CUDA_CHECK(cudaStreamDestroy(stream));
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[static_cast<size_t>(reps / 2)] / kCallsPerGraph;
}

// `bytes` of device memory holding valid blocks: 64 quantized random rows, tiled.
DeviceBuffer weights(QuantType type, int64_t n_in, uint64_t bytes, std::mt19937& rng) {
  const uint64_t row = *mt::row_bytes(type, static_cast<uint64_t>(n_in));
  const uint64_t tile = 64 * row;
  std::vector<uint8_t> host(tile);
  std::vector<float> x(static_cast<size_t>(n_in));
  std::normal_distribution<float> g(0.f, 0.05f);
  for (int r = 0; r < 64; ++r) {
    for (float& v : x) v = g(rng);
    mt::quantize_row(type, x.data(), host.data() + r * row, n_in);
  }
  DeviceBuffer d(bytes);
  auto* p = d.as<uint8_t>();
  const uint64_t first = std::min(tile, bytes);
  MT_CUDA_CHECK(cudaMemcpy(p, host.data(), first, cudaMemcpyHostToDevice));
  for (uint64_t done = first; done < bytes;) {  // double the filled prefix
    const uint64_t n = std::min(done, bytes - done);
    MT_CUDA_CHECK(cudaMemcpy(p + done, p, n, cudaMemcpyDeviceToDevice));
    done += n;
  }
  return d;
}

struct Result {
  std::string type;
  int64_t n_in = 0, n_out = 0, n_mat = 1;
  uint64_t bytes = 0;  // weight bytes read per call
  double us = 0, gbs = 0, copy_gbs = 0;
};

Result run_type(QuantType type, const Flags& f, std::mt19937& rng) {
  Result r;
  r.type = mt::type_name(type);
  r.n_in = f.experts ? 2048 : 4096;
  const uint64_t row = *mt::row_bytes(type, static_cast<uint64_t>(r.n_in));
  const uint64_t budget = f.mib << 20;
  const int K = 8;
  if (f.experts) {
    r.n_out = 768;
    r.n_mat = std::max<int64_t>(2 * K, static_cast<int64_t>(budget / (row * 768)));
    r.bytes = static_cast<uint64_t>(K) * row * 768;
  } else {
    r.n_out = static_cast<int64_t>(budget / row) / 64 * 64;
    r.bytes = row * static_cast<uint64_t>(r.n_out);
  }
  const uint64_t total = row * static_cast<uint64_t>(r.n_out) * static_cast<uint64_t>(r.n_mat);
  const DeviceBuffer w = weights(type, r.n_in, total, rng);
  const DeviceMatrix m{type, w.as<uint8_t>(), r.n_in, r.n_out, r.n_mat, row, row * static_cast<uint64_t>(r.n_out)};
  std::vector<float> hx(static_cast<size_t>(f.tokens * K * r.n_in));
  std::normal_distribution<float> g(0.f, 1.f);
  for (float& v : hx) v = g(rng);
  DeviceBuffer x(hx.size() * sizeof(float)), y(static_cast<size_t>(f.tokens * K * r.n_out) * sizeof(float));
  MT_CUDA_CHECK(cudaMemcpy(x.get(), hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
  mt::cuda::Workspace ws(mt::cuda::mmvq_workspace_bytes(m, f.tokens, f.experts ? K : 1));
  double ms = 0;
  if (f.experts) {
    std::vector<int32_t> ids;  // K distinct experts per token, a fresh draw per call
    std::vector<int32_t> all(static_cast<size_t>(r.n_mat));
    for (int32_t e = 0; e < r.n_mat; ++e) all[static_cast<size_t>(e)] = e;
    for (int c = 0; c < kCallsPerGraph * f.tokens; ++c) {
      std::shuffle(all.begin(), all.end(), rng);
      ids.insert(ids.end(), all.begin(), all.begin() + K);
    }
    DeviceBuffer dids(ids.size() * sizeof(int32_t));
    MT_CUDA_CHECK(cudaMemcpy(dids.get(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    ms = median_ms(f.reps, [&](int i, cudaStream_t s) {
      ws.reset();
      const int32_t* draw = dids.as<int32_t>() + static_cast<int64_t>(i) * f.tokens * K;
      mt::cuda::mmvq_experts(m, {draw, f.tokens, K, false}, x.as<float>(), y.as<float>(), ws, s);
    });
    r.bytes *= static_cast<uint64_t>(f.tokens);
  } else {
    ms = median_ms(f.reps, [&](int, cudaStream_t s) {
      ws.reset();
      mt::cuda::mmvq(m, 0, x.as<float>(), f.tokens, y.as<float>(), ws, s);
    });
  }
  r.us = ms * 1e3;
  r.gbs = static_cast<double>(r.bytes) / (ms * 1e-3) / 1e9;
  const uint64_t copy_bytes = std::min(r.bytes, total);
  DeviceBuffer dst(copy_bytes);
  const double copy_ms = median_ms(f.reps, [&](int, cudaStream_t s) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.get(), w.get(), copy_bytes, cudaMemcpyDeviceToDevice, s));
  });
  r.copy_gbs = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e-3) / 1e9;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"moetier_cuda_mmvq: decode matrix-vector throughput per weight type vs device memcpy"};
  app.add_option("--mib", f.mib, "weight bytes per type in MiB (default 256)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--tokens", f.tokens, "activation rows per call (default 1)")->check(CLI::Range(1, 8));
  app.add_option("--reps", f.reps, "timed graph launches per figure (default 20)")->check(CLI::Range(1, 10000));
  app.add_flag("--experts", f.experts, "routed: mmvq_experts, K = 8 of 2048 -> 768 experts");
  app.add_flag("--json", f.json, "JSON instead of a table");
  app.add_option("--types", f.types, "only these types (names as in GGUF: q4_K,q4_0,...)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  const QuantType types[] = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K,   QuantType::Q2_K, QuantType::Q3_K,
                             QuantType::IQ4_XS, QuantType::Q4_0, QuantType::Q4_1, QuantType::Q5_0, QuantType::Q5_1,
                             QuantType::Q8_0, QuantType::IQ4_NL, QuantType::MXFP4, QuantType::BF16, QuantType::F16,
                             QuantType::F32};
  std::vector<QuantType> chosen(std::begin(types), std::end(types));
  if (!f.types.empty()) chosen.clear();
  for (const std::string& name : f.types) {
    const auto t = mt::type_from_name(name);
    if (!t || std::find(std::begin(types), std::end(types), *t) == std::end(types)) {
      std::fprintf(stderr, "moetier_cuda_mmvq: --types: '%s' is not one of the benchmarked weight types\n",
                   name.c_str());
      return 2;
    }
    chosen.push_back(*t);
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "moetier_cuda_mmvq: %s\n", mt::cuda::describe_devices().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  std::vector<Result> results;
  if (!f.json) {
    std::printf("moetier_cuda_mmvq: %s, %s, %d token(s), median of %d\n", mt::cuda::describe_devices().c_str(),
                f.experts ? "routed K=8" : "dense", f.tokens, f.reps);
    std::printf("| type | n_in | n_out | matrices | MiB read | us | mmvq GB/s | copy GB/s | mmvq / copy |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (QuantType type : chosen) {
    const Result r = run_type(type, f, rng);
    results.push_back(r);
    if (!f.json) {
      std::printf("| %s | %lld | %lld | %lld | %.1f | %.1f | %.0f | %.0f | %.2f |\n", r.type.c_str(),
                  static_cast<long long>(r.n_in), static_cast<long long>(r.n_out), static_cast<long long>(r.n_mat),
                  static_cast<double>(r.bytes) / (1 << 20), r.us, r.gbs, r.copy_gbs, r.gbs / r.copy_gbs);
      std::fflush(stdout);
    }
  }
  if (f.json) {
    nlohmann::ordered_json j;
    j["device"] = mt::cuda::describe_devices();
    j["mode"] = f.experts ? "experts" : "dense";
    j["tokens"] = f.tokens;
    j["reps"] = f.reps;
    for (const Result& r : results) {
      j["results"].push_back({{"type", r.type}, {"n_in", r.n_in}, {"n_out", r.n_out}, {"n_mat", r.n_mat},
                              {"bytes", r.bytes}, {"us", r.us}, {"gbs", r.gbs}, {"copy_gbs", r.copy_gbs},
                              {"fraction_of_copy", r.gbs / r.copy_gbs}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}
