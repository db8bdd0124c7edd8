#include "experts/hw_profile.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace mt {

// Lookups. Every figure is GB/s (or GFLOP/s); 0 means "nothing to go on".

// The best figure measured at <= threads (more threads never read slower than fewer: the
// caller could run fewer); the smallest point's when threads is below every point.
double HwProfile::host_read_gbps(uint32_t n_threads) const {
  if (host_read.empty()) return 0;
  double best = 0;
  for (const HostReadPoint& p : host_read) {
    if (p.threads <= n_threads) best = std::max(best, p.gbps);
  }
  return best > 0 ? best : host_read.front().gbps;
}

namespace {

// The expert figure of `type`, else the slowest measured type's (an unmeasured type is
// assumed no faster than any measured one); nullptr when nothing was measured.
const CpuExpertSpeed* expert_speed(const std::vector<CpuExpertSpeed>& speeds, QuantType type) {
  const CpuExpertSpeed* slowest = nullptr;
  for (const CpuExpertSpeed& s : speeds) {
    if (s.type == type) return &s;
    if (slowest == nullptr || s.decode_gbps < slowest->decode_gbps) slowest = &s;
  }
  return slowest;
}

// Without any expert figure: decode at 0.8 of the host read bandwidth at `threads` (the
// ratio default_hw_profile assumes for the k-quants), prefill at a guessed 25 GFLOP/s per
// thread (default_hw_profile's guess).
constexpr double kDecodeOfRead = 0.8;
constexpr double kGuessGflopsPerThread = 25;

}  // namespace

double HwProfile::cpu_decode_gbps(QuantType type) const {
  if (const CpuExpertSpeed* s = expert_speed(cpu_expert, type)) return s->decode_gbps;
  return host_read_gbps(threads) * kDecodeOfRead;
}

double HwProfile::cpu_prefill_gflops(QuantType type) const {
  if (const CpuExpertSpeed* s = expert_speed(cpu_expert, type)) return s->prefill_gflops;
  return kGuessGflopsPerThread * std::max<uint32_t>(1, threads);
}

// Linear in log2(bytes) between the two points around copy_bytes, clamped to the first
// and last points outside them.
double HwProfile::h2d_gbps(uint64_t copy_bytes, bool pinned) const {
  const std::vector<CopyPoint>& h = gpu.h2d;
  if (!has_gpu || h.empty()) return 0;
  auto gbps = [&](const CopyPoint& p) { return pinned ? p.pinned_gbps : p.pageable_gbps; };
  if (copy_bytes <= h.front().bytes) return gbps(h.front());
  if (copy_bytes >= h.back().bytes) return gbps(h.back());
  const auto hi = std::upper_bound(h.begin(), h.end(), copy_bytes,
                                   [](uint64_t b, const CopyPoint& p) { return b < p.bytes; });
  const auto lo = std::prev(hi);
  const double x = std::log2(static_cast<double>(copy_bytes));
  const double x0 = std::log2(static_cast<double>(lo->bytes)), x1 = std::log2(static_cast<double>(hi->bytes));
  return gbps(*lo) + (gbps(*hi) - gbps(*lo)) * (x - x0) / (x1 - x0);
}

double HwProfile::device_gbps() const { return has_gpu ? gpu.device_gbps : 0; }

// Assumptions (no measurement behind any of them):
//   * 16 threads (an 8-core / 16-thread or 16-core desktop part);
//   * dual-channel DDR5-5600 (89.6 GB/s peak): ~60 GB/s read with 16 threads, one thread
//     ~12 GB/s (limited by its outstanding misses), saturating around 8 threads;
//   * CPU expert decode at 0.8 of the 16-thread read for the k-quants (and the other
//     types, which are no slower per byte); prefill 400 GFLOP/s at a 64-token batch
//     (25 per thread, a guess for int8 dot products with AVX2/AVX-512);
//   * a PCIe 4.0 x16 GPU link: pinned copies ~24 GB/s from 4 MiB up, less for small
//     copies (fixed per-copy cost ~ 10 us); pageable ~10 GB/s (an extra host memcpy);
//   * device memory 3000 GB/s (HBM3-class).
HwProfile default_hw_profile() {
  HwProfile p;
  p.source = "assumed";
  p.cpu = "assumed: 16-thread CPU, dual-channel DDR5";
  p.threads = 16;
  p.host_read = {{1, 12}, {2, 22}, {4, 38}, {8, 54}, {16, 60}};
  for (QuantType t : {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K, QuantType::Q8_0, QuantType::IQ4_XS,
                      QuantType::BF16, QuantType::F16}) {
    p.cpu_expert.push_back({t, 0.8 * 60, 400});
  }
  p.has_gpu = true;
  p.gpu.name = "assumed: PCIe 4.0 x16 GPU";
  p.gpu.device_gbps = 3000;
  p.gpu.h2d = {{64ull << 10, 5, 3}, {256ull << 10, 13, 6}, {1ull << 20, 20, 8}, {4ull << 20, 24, 10},
               {64ull << 20, 24, 10}};
  return p;
}

}  // namespace mt
