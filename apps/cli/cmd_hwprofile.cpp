// moetier hwprofile: measure this machine (runtime/hw_measure.h) and write the hardware
// profile the planner and the simulator read (experts/hw_profile.h): JSON to stdout, or to
// -o FILE; a short human summary to stderr. --quick uses small buffers and two passes
// (seconds; for tests, the figures mean little).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "apps/cli/commands.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/gpu_measure.h"
#include "cuda/host_memory.h"
#endif
#include "core/status.h"
#include "runtime/hw_measure.h"

namespace mt::cli {
namespace {

struct HwProfileFlags {
  std::string output;  // empty: stdout
  int threads = 0;
  bool quick = false;
};

void print_summary(const HwProfile& p) {
  std::fprintf(stderr, "cpu: %s, %u threads\n", p.cpu.c_str(), p.threads);
  std::fprintf(stderr, "host read:");
  for (const HostReadPoint& r : p.host_read) std::fprintf(stderr, "  %u t %.1f GB/s", r.threads, r.gbps);
  std::fprintf(stderr, "\n");
  for (const CpuExpertSpeed& s : p.cpu_expert) {
    std::fprintf(stderr, "cpu experts %-6s decode %6.1f GB/s  prefill %7.1f GFLOP/s\n", type_name(s.type),
                 s.decode_gbps, s.prefill_gflops);
  }
  if (p.has_gpu) {
    std::fprintf(stderr, "gpu: %s, device %.0f GB/s, host-to-device (pinned) %.1f GB/s\n", p.gpu.name.c_str(),
                 p.gpu.device_gbps, p.gpu.h2d.empty() ? 0.0 : p.gpu.h2d.back().pinned_gbps);
  } else {
    std::fprintf(stderr, "gpu: none measured\n");
  }
}

int run(const HwProfileFlags& f) {
  if (f.threads < 0 || f.threads > kMaxThreads) {
    return fail("hwprofile", invalid_argument("-t must be in 0.." + std::to_string(kMaxThreads)));
  }
  std::ofstream out;
  if (!f.output.empty()) {  // before measuring: a bad path fails at once
    out.open(f.output, std::ios::binary | std::ios::trunc);
    if (!out) return fail("hwprofile", io_error("cannot create '" + f.output + "'"));
  }
  MeasureOptions o = f.quick ? quick_measure_options() : MeasureOptions{};
  o.threads = f.threads;
#ifdef MOETIER_HAVE_CUDA
  if (cuda::device_memory(0).ok()) {
    const bool quick = f.quick;
    o.measure_gpu = [quick]() { return cuda::measure_gpu_profile({0, 5, quick}); };
  }
#endif
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty) {
    o.note = [](const std::string& what) { std::fprintf(stderr, "\r\033[Kmeasuring %s", what.c_str()); };
  }
  StatusOr<HwProfile> p = measure_hw_profile(o);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!p.ok()) return fail("hwprofile", p.status());
  const std::string json = hw_profile_to_json(*p) + "\n";
  if (f.output.empty()) {
    std::fputs(json.c_str(), stdout);
  } else {
    out << json;
    out.close();
    if (!out) return fail("hwprofile", io_error("cannot write '" + f.output + "'"));
  }
  print_summary(*p);
  return 0;
}

}  // namespace

Runner add_hwprofile(CLI::App& app) {
  auto f = std::make_shared<HwProfileFlags>();
  app.add_option("-o,--output", f->output, "write the profile here (default: stdout)");
  app.add_option("-t,--threads", f->threads, "CPU threads (default: all)");
  app.add_flag("--quick", f->quick, "small buffers, few passes: seconds, for tests (figures not meaningful)");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
