// moetier_kernels: single-thread throughput of the CPU dot kernels at the active ISA level
// (MOETIER_CPU_ISA lowers it), weights resident in cache, so the figures are the kernels'
// compute ceilings, not memory-bound decode speeds.
//
// For each type: the vec_dot loop over rows (decode, GGUF layout), the tile kernel on one
// token (what matmul runs for decode where the level's dots and tiles must agree), the interleaved kernel
// (gemm_x8, decode = 1 token) where the type has one, and for a 64-token tile (prefill) the
// GGUF-layout tile kernel (gemm) and the interleaved kernel. n = 2048 inputs, 56 rows
// (~64 KiB of Q4_K, one matmul_jobs unit). GMAC/s = rows x n x tokens x calls / seconds,
// best of 3 timed batches.
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/reference.h"

namespace {

using mt::QuantType;
constexpr int64_t kN = 2048, kRows = 56, kTokens = 64;

template <typename Fn>
double best_gmacs(double macs_per_call, Fn fn) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int calls = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    do {
      for (int i = 0; i < 50; ++i) fn();
      calls += 50;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 0.3);
    best = std::max(best, macs_per_call * calls / s / 1e9);
  }
  return best;
}

}  // namespace

int main() {
  const mt::cpu::KernelTable& k = mt::cpu::kernels();
  std::printf("moetier_kernels: level %s, n=%lld, %lld rows, 1 thread, GMAC/s (best of 3)\n", mt::cpu::isa_name(k.isa),
              static_cast<long long>(kN), static_cast<long long>(kRows));
  std::printf("| type | vec_dot loop, 1 token | tile (gemm), 1 token | interleaved, 1 token | tile (gemm), %lld tokens | interleaved, %lld tokens |\n",
              static_cast<long long>(kTokens), static_cast<long long>(kTokens));
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> f(static_cast<size_t>(kN * std::max(kRows, kTokens)));
  for (float& x : f) x = g(rng);
  for (QuantType type : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::IQ4_XS, QuantType::Q8_0,
                         QuantType::Q5_0, QuantType::Q4_0}) {
    const auto t = static_cast<int>(type);
    const QuantType act_type = mt::cpu::activation_type(type);
    const size_t wrow = *mt::row_bytes(type, kN), arow = mt::cpu::activation_row_bytes(type, kN);
    std::vector<uint8_t> w(wrow * kRows), act(arow * kTokens);
    for (int64_t r = 0; r < kRows; ++r) mt::quantize_row(type, &f[r * kN], &w[r * wrow], kN);
    for (int64_t i = 0; i < kTokens; ++i) k.quantize[static_cast<int>(act_type)](&f[i * kN], &act[i * arow], kN);
    std::vector<float> y(static_cast<size_t>(kRows * kTokens));
    const double one = static_cast<double>(kRows) * kN, many = one * kTokens;
    char cells[5][32] = {"-", "-", "-", "-", "-"};
    std::snprintf(cells[0], sizeof(cells[0]), "%.1f", best_gmacs(one, [&] {
      for (int64_t r = 0; r < kRows; ++r) y[r] = k.vec_dot[t](kN, &w[r * wrow], act.data());
    }));
    std::vector<uint8_t> x8;
    if (k.gemm_x8[t] != nullptr) {
      x8.resize(w.size());
      mt::cpu::interleave_rows(type, w.data(), wrow, kN, kRows, x8.data());
      std::snprintf(cells[1], sizeof(cells[1]), "%.1f", best_gmacs(one, [&] {
        k.gemm_x8[t](kN, x8.data(), mt::cpu::kInterleave * wrow, kRows, act.data(), arow, 1, y.data(), kRows);
      }));
      std::snprintf(cells[3], sizeof(cells[3]), "%.1f", best_gmacs(many, [&] {
        k.gemm_x8[t](kN, x8.data(), mt::cpu::kInterleave * wrow, kRows, act.data(), arow, kTokens, y.data(), kRows);
      }));
    }
    if (k.gemm[t] != nullptr) {
      std::snprintf(cells[4], sizeof(cells[4]), "%.1f", best_gmacs(one, [&] {
        k.gemm[t](kN, w.data(), wrow, kRows, act.data(), arow, 1, y.data(), kRows);
      }));
      std::snprintf(cells[2], sizeof(cells[2]), "%.1f", best_gmacs(many, [&] {
        k.gemm[t](kN, w.data(), wrow, kRows, act.data(), arow, kTokens, y.data(), kRows);
      }));
    }
    std::printf("| %s | %s | %s | %s | %s | %s |\n", mt::type_name(type), cells[0], cells[4], cells[1], cells[2], cells[3]);
  }
  return 0;
}
