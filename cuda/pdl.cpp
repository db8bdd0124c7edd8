// The programmatic-dependent-launch switch (cuda/pdl.h).
#include "cuda/pdl.h"

#include <atomic>

#include "cuda/env_switch.h"

namespace mt::cuda {
namespace {

// MOETIER_CUDA_PDL=1: off. Measured slower in the decode step on the H200 (q4_k_m tg128
// 294.6 / 298.3 vs 299.0 / 299.8 t/s, q4_0 312.6 / 311.8 vs 317.6 / 319.4), although one
// product alone launched dependent saves 0.3-0.7 us; docs/PERFORMANCE.md.
EnvSwitch g_pdl("MOETIER_CUDA_PDL");
std::atomic<uint64_t> g_dependent_launches{0};

bool device_supports() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return ok;
}

}  // namespace

bool pdl_on() { return g_pdl.on() && device_supports(); }
void set_pdl(bool on) { g_pdl.set(on); }
uint64_t pdl_dependent_launches() { return g_dependent_launches.load(std::memory_order_relaxed); }
void count_dependent_launch() { g_dependent_launches.fetch_add(1, std::memory_order_relaxed); }

}  // namespace mt::cuda
