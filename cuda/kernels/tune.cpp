// moetier tune / moetier_cuda_tune (cuda/kernels/tune.h): measures where mmq (int8 tensor cores) and gemm (dequant + cuBLAS)
// overtake mmvq on this GPU, where gemm overtakes mmq for dense products, how close mmq
// and the gemm path come to cuBLAS's own F16 rate, and the dequantizer's bandwidth. The
// kernel-level numbers behind cuda/dispatch_sm<NN>.inc.
//
// Shapes are qwen3-30b-a3b's: dense 2048 -> 4096; experts 128 x (2048 -> 768) (gate/up)
// and 128 x (768 -> 2048) (down), top-8 routing with random distinct experts per token.
// Each timing is the median of CUDA-event intervals after warm-up, for n_tokens 1..64 and
// then on to 512. The mmvq limit printed for a type is the last n_tokens scanned before
// the kernel dispatch uses above it (mmq where it supports the type, else gemm) is first
// faster than mmvq (the scan's end when it never is); for experts the smaller of the two
// expert shapes' limits. The dense mmq limit is the last n_tokens scanned before gemm is
// first faster than mmq (kNoLimit when it never is). The table rows print ready to paste.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/tune.h"

#include <chrono>
#include <ctime>
#include <fstream>

#include "cuda/kernels/check.h"
#include "cuda/kernels/cublas_check.h"
#include "cuda/kernels/dequant.h"
#include "cuda/kernels/dispatch.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/memory.h"
#include "cuda/kernels/mmq.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace mt::cuda {
namespace {

constexpr int kWarmup = 3;
constexpr int kIters = 15;
constexpr int kDenseScan = 64;   // n_tokens 1..kDenseScan, then 96 .. kMaxTokens
constexpr int kMaxTokens = 512;
constexpr int kTopK = 8;
constexpr int kPoolRows = 64;  // distinct random rows, repeated over the matrix

// A device matrix of n_mat x n_out rows of n_in random weights (timing does not depend on
// the values: kPoolRows quantized rows are repeated).
struct BenchMatrix {
  DeviceBuffer data;
  DeviceMatrix w;
};

BenchMatrix make_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, std::mt19937& rng) {
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(n_in));
  std::vector<uint8_t> pool(rb * kPoolRows);
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int r = 0; r < kPoolRows; ++r) {
    for (float& x : row) x = g(rng);
    quantize_row(type, row.data(), pool.data() + r * rb, n_in);
  }
  const uint64_t rows = static_cast<uint64_t>(n_out * n_mat);
  std::vector<uint8_t> bytes(rb * rows);
  for (uint64_t r = 0; r < rows; ++r) std::copy_n(pool.data() + (r % kPoolRows) * rb, rb, bytes.data() + r * rb);
  BenchMatrix m{DeviceBuffer(bytes.size()), {}};
  MT_CUDA_CHECK(cudaMemcpy(m.data.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  m.w = {type, m.data.as<uint8_t>(), n_in, n_out, n_mat, rb, rb * static_cast<uint64_t>(n_out)};
  return m;
}

class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    MT_CUDA_CHECK(cudaEventCreate(&a_));
    MT_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Median milliseconds of fn() on the stream after kWarmup untimed calls.
  template <class Fn>
  double median_ms(Fn&& fn) {
    for (int i = 0; i < kWarmup; ++i) fn();
    MT_CUDA_CHECK(cudaStreamSynchronize(s_));
    std::vector<float> ms(kIters);
    for (float& t : ms) {
      MT_CUDA_CHECK(cudaEventRecord(a_, s_));
      fn();
      MT_CUDA_CHECK(cudaEventRecord(b_, s_));
      MT_CUDA_CHECK(cudaEventSynchronize(b_));
      MT_CUDA_CHECK(cudaEventElapsedTime(&t, a_, b_));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

struct Bench {
  cudaStream_t stream = nullptr;
  Workspace* ws = nullptr;
  Timer* timer = nullptr;
  const float* x = nullptr;      // (kMaxTokens * kTopK, n_embd) random activations
  float* y = nullptr;            // (kMaxTokens * kTopK, 4096)
  const int32_t* ids = nullptr;  // (kMaxTokens, kTopK) random distinct experts
};

template <class Fn>
double timed(Bench& b, Fn&& fn) {
  return b.timer->median_ms([&] {
    const size_t mark = b.ws->mark();
    fn();
    b.ws->rewind(mark);
  });
}

std::vector<int> scan() {
  std::vector<int> ts;
  for (int t = 1; t <= kDenseScan; ++t) ts.push_back(t);
  for (int t : {96, 128, 192, 256, 384, kMaxTokens}) ts.push_back(t);
  return ts;
}

// The limits one shape gives: mmvq's (against the next kernel) and dense mmq's (against
// gemm; kNoLimit when gemm is never faster or mmq does not take the type).
struct Limits {
  int mmvq = 0;
  int mmq = kNoLimit;
};

// mmvq, mmq (where it supports the type) and gemm times for the scanned n_tokens. Experts
// read X per token (gate/up) or per slot (down: per_slot).
Limits crossover(Bench& b, const DeviceMatrix& w, bool experts, bool per_slot, const char* label) {
  const bool has_mmq = mmq_supports(w.type);
  std::printf("  %-22s  T   mmvq_us    mmq_us   gemm_us\n", label);
  const std::vector<int> ts = scan();
  Limits lim;
  lim.mmvq = ts.back();
  bool mmvq_crossed = false, mmq_crossed = false;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int t = ts[i];
    double mm = 0, mq = 0, gg = 0;
    if (experts) {
      mm = timed(b, [&] { mmvq_experts_chunked(w, {b.ids, t, kTopK, per_slot}, b.x, b.y, *b.ws, b.stream); });
      if (has_mmq) mq = timed(b, [&] { mmq_experts(w, {b.ids, t, kTopK, per_slot}, b.x, b.y, *b.ws, b.stream); });
      gg = timed(b, [&] { gemm_experts(w, {b.ids, t, kTopK, per_slot}, b.x, b.y, *b.ws, b.stream); });
    } else {
      mm = timed(b, [&] { mmvq_chunked(w, 0, b.x, t, b.y, *b.ws, b.stream); });
      if (has_mmq) mq = timed(b, [&] { mmq(w, 0, b.x, t, b.y, *b.ws, b.stream); });
      gg = timed(b, [&] { gemm(w, 0, b.x, t, b.y, *b.ws, b.stream); });
    }
    const double next = has_mmq ? mq : gg;  // what dispatch uses above the mmvq limit
    if (!mmvq_crossed && next < mm) {
      lim.mmvq = i > 0 ? ts[i - 1] : 0;
      mmvq_crossed = true;
    }
    if (has_mmq && !experts && !mmq_crossed && gg < mq) {
      lim.mmq = i > 0 ? ts[i - 1] : 0;
      mmq_crossed = true;
    }
    if (t <= 16 || t % 8 == 0) {
      std::printf("  %-22s %3d %9.1f %9.1f %9.1f%s\n", "", t, 1e3 * mm, 1e3 * mq, 1e3 * gg,
                  next < mm ? (has_mmq ? "  mmq" : "  gemm") : "");
    }
  }
  std::printf("  -> mmvq up to %d tokens%s\n", lim.mmvq, mmvq_crossed ? "" : " (never slower in the scan)");
  if (has_mmq && !experts) {
    if (mmq_crossed) {
      std::printf("  -> mmq up to %d tokens, then gemm\n", lim.mmq);
    } else {
      std::printf("  -> mmq up to the scan's end (gemm never faster)\n");
    }
  }
  return lim;
}

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

// Plain cuBLAS F16 GEMM (F16 operands, f32 output and accumulation): m x n x k.
double cublas_f16_ms(Bench& b, cublasHandle_t h, int m, int n, int k) {
  DeviceBuffer a(static_cast<size_t>(m) * k * 2), bb(static_cast<size_t>(k) * n * 2), c(static_cast<size_t>(m) * n * 4);
  MT_CUDA_CHECK(cudaMemsetAsync(a.get(), 0, a.bytes(), b.stream));
  MT_CUDA_CHECK(cudaMemsetAsync(bb.get(), 0, bb.bytes(), b.stream));
  const float alpha = 1.f, beta = 0.f;
  return b.timer->median_ms([&] {
    MT_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.get(), CUDA_R_16F, k, bb.get(),
                                 CUDA_R_16F, k, &beta, c.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  });
}

void rates(Bench& b, cublasHandle_t h, const DeviceMatrix& dense, const DeviceMatrix& up) {
  DeviceBuffer tile(static_cast<size_t>(dense.n_out * dense.n_in) * sizeof(__half));
  const double dq = b.timer->median_ms([&] {
    dequantize_rows(dense.type, dense.data, dense.row_bytes, dense.n_out, dense.n_in, tile.as<__half>(), b.stream);
  });
  const double bytes = static_cast<double>(dense.row_bytes * dense.n_out + tile.bytes());
  std::printf("  dequantize %lldx%lld to F16: %.1f us, %.0f GB/s read + written\n", static_cast<long long>(dense.n_out),
              static_cast<long long>(dense.n_in), 1e3 * dq, bytes / (dq * 1e-3) / 1e9);
  std::printf("  gemm path (and mmq) vs plain cuBLAS F16 (same shape):\n");
  const bool has_mmq = mmq_supports(dense.type);
  for (int t : {64, kMaxTokens}) {
    const double flops = 2.0 * t * dense.n_in * dense.n_out;
    const double ours = timed(b, [&] { gemm(dense, 0, b.x, t, b.y, *b.ws, b.stream); });
    const double ref = cublas_f16_ms(b, h, static_cast<int>(dense.n_out), t, static_cast<int>(dense.n_in));
    std::printf("    dense   T=%-4d %7.1f TFLOP/s vs cuBLAS %7.1f TFLOP/s (%.0f%%)\n", t, tflops(flops, ours),
                tflops(flops, ref), 100.0 * ref / ours);
    if (has_mmq) {
      const double mq = timed(b, [&] { mmq(dense, 0, b.x, t, b.y, *b.ws, b.stream); });
      std::printf("    dense   T=%-4d mmq %7.1f TOP/s, %.1f us (%.0f%% of cuBLAS F16)\n", t, tflops(flops, mq),
                  1e3 * mq, 100.0 * ref / mq);
    }
  }
  // t tokens routed to kTopK experts each: the grouped product vs one GEMM of all slots
  // (the same FLOPs, no routing).
  for (int t : {64, kMaxTokens}) {
    const int slots = t * kTopK;
    const double flops = 2.0 * slots * up.n_in * up.n_out;
    const double ours = timed(b, [&] { gemm_experts(up, {b.ids, t, kTopK, false}, b.x, b.y, *b.ws, b.stream); });
    const double ref = cublas_f16_ms(b, h, static_cast<int>(up.n_out), slots, static_cast<int>(up.n_in));
    std::printf("    experts T=%-4d %7.1f TFLOP/s vs cuBLAS (one GEMM of %d slots) %7.1f TFLOP/s (%.0f%%)\n", t,
                tflops(flops, ours), slots, tflops(flops, ref), 100.0 * ref / ours);
    if (has_mmq) {  // mmq_experts with its own tile width (0) and each width
      for (int width : {0, 16, 32, 64}) {
        const double mq = timed(b, [&] {
          mmq_experts_tiled(up, {b.ids, t, kTopK, false}, b.x, b.y, *b.ws, b.stream, width);
        });
        std::printf("    experts T=%-4d mmq tile %-4s %7.1f TOP/s, %.1f us (%.1fx the gemm path)\n", t,
                    width == 0 ? "auto" : std::to_string(width).c_str(), tflops(flops, mq), 1e3 * mq, ours / mq);
      }
    }
  }
}

}  // namespace

int run_tune(const TuneOptions& options) {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const int sm = current_sm();
  std::printf("moetier tune: %s (sm_%d), medians of %d after %d warm-up\n", prop.name, sm, kIters, kWarmup);

  cudaStream_t stream = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  MT_CUBLAS_CHECK(cublasCreate(&handle));
  MT_CUBLAS_CHECK(cublasSetStream(handle, stream));

  std::mt19937 rng(1);
  const int64_t n_embd = 2048, n_dense_out = 4096, n_ff = 768, n_expert = 128;
  const int slots = kMaxTokens * kTopK;
  std::vector<float> xh(static_cast<size_t>(slots) * n_embd);
  std::normal_distribution<float> g(0.f, 1.f);
  for (float& v : xh) v = g(rng);
  std::vector<int32_t> idh(static_cast<size_t>(slots));
  std::vector<int32_t> all(static_cast<size_t>(n_expert));
  for (int e = 0; e < n_expert; ++e) all[static_cast<size_t>(e)] = e;
  for (int t = 0; t < kMaxTokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), kTopK, idh.begin() + t * kTopK);
  }
  DeviceBuffer xd(xh.size() * sizeof(float)), yd(static_cast<size_t>(slots) * n_dense_out * sizeof(float));
  DeviceBuffer idd(idh.size() * sizeof(int32_t));
  MT_CUDA_CHECK(cudaMemcpy(xd.get(), xh.data(), xd.bytes(), cudaMemcpyHostToDevice));
  MT_CUDA_CHECK(cudaMemcpy(idd.get(), idh.data(), idd.bytes(), cudaMemcpyHostToDevice));

  Timer timer(stream);
  std::vector<std::string> rows;
  for (QuantType type : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_0, QuantType::Q4_0}) {
    std::printf("\n%s\n", type_name(type));
    BenchMatrix dense = make_matrix(type, n_embd, n_dense_out, 1, rng);
    BenchMatrix up = make_matrix(type, n_embd, n_ff, n_expert, rng);
    BenchMatrix down = make_matrix(type, n_ff, n_embd, n_expert, rng);
    size_t ws_bytes = matmul_workspace_bytes(dense.w, kMaxTokens, 1);
    for (const DeviceMatrix* w : {&up.w, &down.w}) {
      ws_bytes = std::max(ws_bytes, matmul_workspace_bytes(*w, kMaxTokens, kTopK));
    }
    Workspace ws(ws_bytes);
    Bench b{stream, &ws, &timer, xd.as<float>(), yd.as<float>(), idd.as<int32_t>()};
    const Limits d = crossover(b, dense.w, false, false, "dense 2048->4096");
    const Limits e_up = crossover(b, up.w, true, false, "experts 2048->768 x128");
    const Limits e_down = crossover(b, down.w, true, true, "experts 768->2048 x128");
    rates(b, handle, dense.w, up.w);
    std::string name = type_name(type);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int dense_mmq = options.dense_mmq_always ? kNoLimit : d.mmq;
    const std::string mmq_limit = dense_mmq == kNoLimit ? "kNoLimit" : std::to_string(dense_mmq);
    rows.push_back("{" + std::to_string(sm) + ", QuantType::" + name + ", " + std::to_string(d.mmvq) + ", " +
                   std::to_string(std::min(e_up.mmvq, e_down.mmvq)) + ", " + mmq_limit + "},");
  }
  std::printf("\n// cuda/dispatch_sm%d.inc rows: {sm, type, dense_max_tokens, experts_max_tokens, "
              "dense_mmq_max_tokens}\n",
              sm);
  for (const std::string& r : rows) std::printf("%s\n", r.c_str());
  MT_CUBLAS_CHECK(cublasDestroy(handle));
  MT_CUDA_CHECK(cudaStreamDestroy(stream));
  if (!options.inc_path.empty()) {
    std::ofstream out(options.inc_path);
    if (!out) {
      std::fprintf(stderr, "moetier tune: cannot write %s\n", options.inc_path.c_str());
      return 1;
    }
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char date[32];
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    out << "// sm_" << sm << " rows of the threshold table (cuda/kernels/dispatch.cpp), written by `moetier tune -o`:\n"
        << "// {sm, type, dense_max_tokens, experts_max_tokens, dense_mmq_max_tokens}.\n"
        << "// Measured on " << prop.name << ", " << date << ": medians of " << kIters << " CUDA-event timings after "
        << kWarmup << " warm-up calls;\n"
        << "// dense 2048 -> 4096, experts 128 x (2048 -> 768) and 128 x (768 -> 2048), top-8.\n";
    if (options.dense_mmq_always) {
      out << "// dense_mmq_max_tokens is kNoLimit by policy (--dense-mmq always): mmq takes the exact integer\n"
          << "// dot of the CPU's activation quantization, cuBLAS F16 rounds X to F16 (faster, further from the\n"
          << "// CPU); `moetier tune --dense-mmq measured` writes the measured crossover instead.\n";
    }
    out << "// Types without a row use kMmvqMaxTokens and kNoLimit. Re-run after changing any of the kernels.\n";
    for (const std::string& r : rows) out << r << "\n";
    std::printf("wrote %s\n", options.inc_path.c_str());
  }
  return 0;
}

}  // namespace mt::cuda
