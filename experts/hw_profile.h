// Hardware profile: the measured speeds the planner's and the simulator's cost model run
// on. `moetier hwprofile` measures the host (memory read bandwidth per thread count, CPU
// expert throughput per quant type) and, with a GPU, the host-to-device copy bandwidth
// (pinned and pageable, by copy size) and the device memory bandwidth. Without a measured
// file the cost model uses default_hw_profile(), whose numbers are assumptions and say so
// (`source` = "assumed"), never passed off as measurements.
//
// JSON (all bandwidths in GB/s = 1e9 bytes/s):
//   {"version": 1, "source": "measured" | "assumed", "date": "...", "cpu": "...",
//    "threads": N,
//    "host_read_gbps": [{"threads": 1, "gbps": 11.2}, ...],
//    "cpu_expert": [{"type": "q4_K", "decode_gbps": 35.1, "prefill_gflops": 410.0}, ...],
//    "gpu": null | {"name": "...", "device_gbps": 4000, "h2d": [{"bytes": 1048576,
//             "pinned_gbps": 20.1, "pageable_gbps": 9.8}, ...]}}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/types.h"

namespace mt {

struct HostReadPoint {
  uint32_t threads = 0;
  double gbps = 0;
};

struct CpuExpertSpeed {
  QuantType type = QuantType::F32;
  double decode_gbps = 0;      // expert weight bytes per second, one token, all threads
  double prefill_gflops = 0;   // 2 * n_in * n_out * tokens / s at a 64-token batch, all threads
};

struct CopyPoint {
  uint64_t bytes = 0;          // one copy of this size
  double pinned_gbps = 0;
  double pageable_gbps = 0;
};

struct GpuProfile {
  std::string name;
  double device_gbps = 0;      // device memory read bandwidth
  std::vector<CopyPoint> h2d;  // ascending bytes
};

struct HwProfile {
  std::string source = "assumed";  // "measured" or "assumed"
  std::string date, cpu;
  uint32_t threads = 0;            // CPU threads the expert figures were measured with
  std::vector<HostReadPoint> host_read;  // ascending threads
  std::vector<CpuExpertSpeed> cpu_expert;
  bool has_gpu = false;
  GpuProfile gpu;

  // Lookups, interpolating / falling back sensibly (documented in the .cpp):
  double host_read_gbps(uint32_t threads) const;           // best at <= threads
  double cpu_decode_gbps(QuantType type) const;            // type's figure, else the slowest measured
  double cpu_prefill_gflops(QuantType type) const;
  double h2d_gbps(uint64_t copy_bytes, bool pinned) const;  // interpolated by size
  double device_gbps() const;
};

// Stated assumptions for a machine nobody measured: a 16-thread workstation CPU with
// dual-channel DDR5 and a PCIe 4.0 x16 GPU link. has_gpu = true so that GPU modes can be
// predicted; `source` is "assumed".
HwProfile default_hw_profile();

std::string hw_profile_to_json(const HwProfile& p);                    // pretty, 2-space indent
StatusOr<HwProfile> hw_profile_from_json(const std::string& text);      // validates every field
StatusOr<HwProfile> read_hw_profile(const std::string& path);

}  // namespace mt
