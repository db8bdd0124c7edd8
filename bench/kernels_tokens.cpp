// moetier_kernels_tokens: single-thread cost per token of the CPU dot kernels at the
// few-token widths of a batched decode step (2-8 sequences' single tokens), against the
// one-token vec_dot loop, at the active ISA level (MOETIER_CPU_ISA lowers it). Weights
// resident in cache (compute ceilings, as moetier_kernels). n = 2048 inputs, 56 rows.
// GMAC/s = rows x n x tokens x calls / seconds, best of 3 timed batches; "x vec_dot" is a
// width's rate over the one-token vec_dot loop's.
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/isa.h"
#include "cpu/kernels.h"
#include "quant/reference.h"

namespace {

using mt::QuantType;
constexpr int64_t kN = 2048, kRows = 56, kMaxTokens = 8;

template <typename Fn>
double best_gmacs(double macs_per_call, Fn fn) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int calls = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    do {
      for (int i = 0; i < 20; ++i) fn();
      calls += 20;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < 0.2);
    best = std::max(best, macs_per_call * calls / s / 1e9);
  }
  return best;
}

}  // namespace

int main() {
  const mt::cpu::KernelTable& k = mt::cpu::kernels();
  const int widths[] = {2, 3, 4, 8};
  std::printf("moetier_kernels_tokens: level %s, n=%lld, %lld rows, 1 thread, GMAC/s (best of 3)\n",
              mt::cpu::isa_name(k.isa), static_cast<long long>(kN), static_cast<long long>(kRows));
  std::printf("| type | vec_dot, 1 token |");
  for (int c : widths) std::printf(" gemm, %d tokens (x vec_dot) |", c);
  std::printf("\n| --- | ---: |");
  for (int c : widths) std::printf(" ---: |%s", c == widths[3] ? "\n" : "");
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> f(static_cast<size_t>(kN * kRows));
  for (float& x : f) x = g(rng);
  for (QuantType type : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_0, QuantType::Q4_0}) {
    const auto t = static_cast<int>(type);
    const QuantType act_type = mt::cpu::activation_type(type);
    const size_t wrow = *mt::row_bytes(type, kN), arow = mt::cpu::activation_row_bytes(type, kN);
    std::vector<uint8_t> w(wrow * kRows), act(arow * kMaxTokens);
    for (int64_t r = 0; r < kRows; ++r) mt::quantize_row(type, &f[r * kN], &w[r * wrow], kN);
    for (int64_t i = 0; i < kMaxTokens; ++i) k.quantize[static_cast<int>(act_type)](&f[i * kN], &act[i * arow], kN);
    std::vector<float> y(static_cast<size_t>(kRows * kMaxTokens));
    const double one = static_cast<double>(kRows) * kN;
    const double base = best_gmacs(one, [&] {
      for (int64_t r = 0; r < kRows; ++r) y[r] = k.vec_dot[t](kN, &w[r * wrow], act.data());
    });
    std::printf("| %s | %.1f |", mt::type_name(type), base);
    for (int c : widths) {
      if (k.gemm[t] == nullptr) {
        std::printf(" - |");
        continue;
      }
      const double rate = best_gmacs(one * c, [&] { k.gemm[t](kN, w.data(), wrow, kRows, act.data(), arow, c, y.data(), kRows); });
      std::printf(" %.1f (%.2f) |", rate, rate / base);
    }
    std::printf("\n");
  }
  return 0;
}
