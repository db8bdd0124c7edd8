// moetier_cuda_floor: the fixed cost of a kernel boundary on this GPU, the floor under a
// decode step that is a chain of dependent kernels (cuda/sequence.h: 11 per layer of a
// Qwen3-MoE model at one token) or of grid-wide barriers (the persistent step measured
// on 2026-12-02 and removed in issue 26, docs/PERFORMANCE.md: 8 per layer).
//
// Chains: --kernels launches of one kernel, each depending on the one before (one
// stream), captured into one CUDA graph as a decode step is; the figure is the median
// over --reps graph launches (after a warm-up) of the graph's time / --kernels:
//   empty 1x32          a CTA of one warp that does nothing
//   empty 264x256       two CTAs per SM that do nothing (a product's grid)
//   row 1x1024          one CTA reads a 2,048-float row, sums its squares (a block
//                       reduction) and writes the row scaled (a norm's shape)
//   ... pdl             the same launched with programmatic dependent launch (sm_90):
//                       each kernel waits on the one before, then lets the next start
// Barriers: one cooperative launch of one CTA (256 threads) per SM (and two per SM)
// passing --kernels cooperative_groups grid barriers; the figure is us per barrier.
// Hand-offs inside one resident grid (one CTA per SM, cooperative launch for residency),
// the dependencies a persistent step would wait on instead of whole-grid barriers:
//   fan-in / fan-out    every CTA adds to a counter (release); CTA 0 waits for all of
//                       them (acquire), sets a flag (release); every CTA waits for the
//                       flag: a product feeding a norm feeding a product (two hand-offs)
//   hop                 CTA i waits for CTA i-1's flag, then sets its own: one
//                       producer-consumer hand-off between two SMs
// Timed with CUDA events; every CUDA call checked.
#include <CLI/CLI.hpp>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "cuda/kernels/check.h"

namespace {

namespace cg = cooperative_groups;

constexpr int kRow = 2048;  // a Qwen3-30B-A3B residual row (floats)

__device__ __forceinline__ void dependent_start(bool pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
#else
  (void)pdl;
#endif
}

__global__ void empty_kernel(bool pdl) { dependent_start(pdl); }

// x (kRow) -> y (kRow) = x / sqrt(mean(x^2) + 1e-6); one CTA of 1024 threads.
__global__ void row_kernel(const float* x, float* y, bool pdl) {
  dependent_start(pdl);
  __shared__ float warp_sums[32];
  float v[kRow / 1024];
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kRow / 1024; ++j) {
    v[j] = x[threadIdx.x + j * 1024];
    s += v[j] * v[j];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < 32; ++w) total += warp_sums[w];
  const float scale = rsqrtf(total / kRow + 1e-6f);
#pragma unroll
  for (int j = 0; j < kRow / 1024; ++j) y[threadIdx.x + j * 1024] = v[j] * scale;
}

__global__ void barrier_kernel(int n_barriers, unsigned* sink) {
  cg::grid_group grid = cg::this_grid();
  unsigned acc = 0;
  for (int i = 0; i < n_barriers; ++i) {
    acc += blockIdx.x ^ static_cast<unsigned>(i);
    grid.sync();
  }
  if (threadIdx.x == 0 && acc == 0xFFFFFFFFu) *sink = acc;  // (keeps the loop)
}

__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __threadfence();
  atomicAdd(p, v);
#endif
}
__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __threadfence();
  *reinterpret_cast<volatile unsigned*>(p) = v;
#endif
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
  v = *reinterpret_cast<const volatile unsigned*>(p);
  __threadfence();
#endif
  return v;
}
// Thread 0 spins until *p >= target; then the CTA goes on together.
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target) {
  if (threadIdx.x == 0) {
    while (load_acquire(p) < target) {
    }
  }
  __syncthreads();
}

// n_pairs rounds of fan-in (every CTA -> CTA 0) and fan-out (CTA 0 -> every CTA). The
// counter and flag start at 0 (the host zeroes them before each launch).
__global__ void fan_kernel(int n_pairs, unsigned* counter, unsigned* flag) {
  const unsigned ctas = gridDim.x;
  for (int i = 0; i < n_pairs; ++i) {
    __syncthreads();  // the CTA's work of this phase done
    if (threadIdx.x == 0) add_release(counter, 1u);
    if (blockIdx.x == 0) {
      wait_at_least(counter, ctas * static_cast<unsigned>(i + 1));
      if (threadIdx.x == 0) store_release(flag, static_cast<unsigned>(i + 1));
    }
    wait_at_least(flag, static_cast<unsigned>(i + 1));
  }
}

// n_hops hand-offs around the ring of CTAs: hop h is CTA h % ctas waiting for *flag == h,
// then writing h + 1. The flag starts at 0.
__global__ void hop_kernel(int n_hops, unsigned* flag) {
  const unsigned ctas = gridDim.x;
  for (unsigned h = blockIdx.x; h < static_cast<unsigned>(n_hops); h += ctas) {
    wait_at_least(flag, h);
    if (threadIdx.x == 0) store_release(flag, h + 1);
  }
}

// Median us of one timed launch of `launch` over `reps`, after one warm-up.
double median_us(int reps, cudaStream_t s, const std::function<void()>& launch) {
  launch();
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    MT_CUDA_CHECK(cudaEventRecord(start, s));
    launch();
    MT_CUDA_CHECK(cudaEventRecord(stop, s));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms[static_cast<size_t>(i)], start, stop));
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return 1000.0 * ms[static_cast<size_t>(reps / 2)];
}

// A chain of n launches of one kernel, captured as one graph: us per kernel.
template <class... Args>
double chain_us(int n, int reps, bool pdl, dim3 grid, dim3 block, void (*kernel)(Args...), Args... args) {
  cudaStream_t s;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cfg.attrs = pdl ? &attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) MT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  MT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_us(reps, s, [&] { MT_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
  MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MT_CUDA_CHECK(cudaGraphDestroy(graph));
  MT_CUDA_CHECK(cudaStreamDestroy(s));
  return us / n;
}

// One cooperative launch (all CTAs resident) of ctas_per_sm CTAs of 256 threads per SM
// running `kernel` with `params`, `n_words` words at `words` zeroed before each launch
// (one memset of a few bytes inside the timed interval, ~2 us spread over n): us per
// barrier / hand-off of the n the kernel passes. -1 where the device cannot.
double cooperative_us(int n, int reps, const void* kernel, void** params, int ctas_per_sm, unsigned* words = nullptr,
                      size_t n_words = 0) {
  int dev = 0, sms = 0, coop = 0, fit = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, 256, 0));
  if (coop == 0 || fit < ctas_per_sm) return -1.0;
  cudaStream_t s;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const dim3 grid(static_cast<unsigned>(sms * ctas_per_sm)), block(256);
  const double us = median_us(reps, s, [&] {
    if (n_words > 0) MT_CUDA_CHECK(cudaMemsetAsync(words, 0, n_words * sizeof(unsigned), s));
    MT_CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, grid, block, params, 0, s));
  });
  MT_CUDA_CHECK(cudaStreamDestroy(s));
  return us / n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moetier_cuda_floor: the fixed cost of a kernel boundary and of a grid barrier on this GPU"};
  int kernels = 528;  // 11 launches per layer x 48 layers: one Qwen3-30B-A3B decode token
  int reps = 20;
  int per_layer = 11;
  int layers = 48;
  app.add_option("--kernels", kernels, "launches per graph (and barriers per cooperative launch)")->check(CLI::Range(1, 100000));
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::Range(1, 10000));
  app.add_option("--per-layer", per_layer, "kernel boundaries per layer, for the per-token column")->check(CLI::Range(1, 1000));
  app.add_option("--layers", layers, "layers per token, for the per-token column")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  cudaDeviceProp prop{};
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int pdl_capable = prop.major >= 9 ? 1 : 0;
  float *x = nullptr, *y = nullptr;
  unsigned* sink = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&x, kRow * sizeof(float)));
  MT_CUDA_CHECK(cudaMalloc(&y, kRow * sizeof(float)));
  MT_CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  std::vector<float> ones(kRow, 1.0f);
  MT_CUDA_CHECK(cudaMemcpy(x, ones.data(), kRow * sizeof(float), cudaMemcpyHostToDevice));

  std::printf("device: %s (sm_%d%d, %d SMs); %d launches per graph, median of %d\n\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, kernels, reps);
  std::printf("| chain | us per boundary | us per token at %d x %d |\n| --- | ---: | ---: |\n", per_layer, layers);
  auto row = [&](const char* name, double us) {
    if (us < 0) {
      std::printf("| %s | n/a | n/a |\n", name);
    } else {
      std::printf("| %s | %.3f | %.1f |\n", name, us, us * per_layer * layers);
    }
  };
  const dim3 one(1), warp(32), wide(static_cast<unsigned>(2 * prop.multiProcessorCount)), t256(256), t1024(1024);
  for (int pdl = 0; pdl <= pdl_capable; ++pdl) {
    const bool p = pdl != 0;
    row(p ? "empty 1x32, pdl" : "empty 1x32", chain_us(kernels, reps, p, one, warp, empty_kernel, p));
    row(p ? "empty 264x256, pdl" : "empty 264x256", chain_us(kernels, reps, p, wide, t256, empty_kernel, p));
    row(p ? "row 1x1024, pdl" : "row 1x1024",
        chain_us<const float*, float*, bool>(kernels, reps, p, one, t1024, row_kernel, x, y, p));
  }
  {
    void* params[] = {&kernels, &sink};
    const void* k = reinterpret_cast<const void*>(barrier_kernel);
    row("grid barrier, 1 CTA per SM", cooperative_us(kernels, reps, k, params, 1));
    row("grid barrier, 2 CTAs per SM", cooperative_us(kernels, reps, k, params, 2));
  }
  unsigned* words = nullptr;  // [counter, flag]
  MT_CUDA_CHECK(cudaMalloc(&words, 2 * sizeof(unsigned)));
  {
    int pairs = std::max(1, kernels / 2);
    unsigned* counter = words;
    unsigned* flag = words + 1;
    void* params[] = {&pairs, &counter, &flag};
    row("fan-in / fan-out, 1 CTA per SM (per hand-off)",
        cooperative_us(2 * pairs, reps, reinterpret_cast<const void*>(fan_kernel), params, 1, words, 2));
  }
  {
    int hops = kernels;
    unsigned* flag = words;
    void* params[] = {&hops, &flag};
    row("hop, CTA to the next CTA",
        cooperative_us(hops, reps, reinterpret_cast<const void*>(hop_kernel), params, 1, words, 1));
  }
  MT_CUDA_CHECK(cudaFree(words));
  MT_CUDA_CHECK(cudaFree(x));
  MT_CUDA_CHECK(cudaFree(y));
  MT_CUDA_CHECK(cudaFree(sink));
  return 0;
}
