// The programmatic-dependent-launch switch (cuda/pdl.h).
#include "cuda/pdl.h"

#include <atomic>

#include "cuda/env_switch.h"

namespace mt::cuda {
namespace {

// MOETIER_CUDA_PDL=1: not yet measured, off.
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
