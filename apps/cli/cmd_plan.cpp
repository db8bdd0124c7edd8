// moetier plan -m FILE: where a model's weights, KV cache and experts would go on this
// machine (or the one described by the flags), and the decode speed predicted for each
// execution mode. Reads metadata only: no tensor data is touched, so it works on
// `synth --sparse` files of any size. The planner itself is experts/planner.h.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "apps/cli/commands.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/host_memory.h"
#endif
#include "apps/cli/model_sizes.h"
#include "apps/cli/sizes.h"
#include "core/log.h"
#include "experts/planner.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

constexpr uint32_t kDefaultMaxCtx = 32768;

struct PlanFlags {
  std::string path, vram, ram, pin_budget, expert_cache = "auto", kv = "f16", mode = "auto", hw_profile, popularity;
  std::optional<uint32_t> ctx, threads;
  uint32_t batch = 1;
  bool json = false;
};

// Device memory of the GPU this build would run on; 0 without one. The one place a
// backend's query (cudaMemGetInfo in a CUDA build) plugs in.
uint64_t detected_device_bytes() {
#ifdef MOETIER_HAVE_CUDA
  auto m = cuda::device_memory(0);
  return m.ok() ? m->total : 0;
#else
  return 0;
#endif
}

StatusOr<uint64_t> host_memory_total() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return not_found("cannot read MemTotal from /proc/meminfo: give --ram");
}

StatusOr<RequestedMode> parse_mode(const std::string& s) {
  if (s == "auto") return RequestedMode::kAuto;
  if (s == "cpu") return RequestedMode::kCpu;
  if (s == "stream") return RequestedMode::kStream;
  if (s == "hybrid") return RequestedMode::kHybrid;
  return invalid_argument("--moe-mode: unknown mode '" + s + "' (auto, cpu, stream, hybrid)");
}

int run(const PlanFlags& fl) {
  PlanInputs in;
  if (fl.kv == "f16") in.kv = KvType::kF16;
  else if (fl.kv == "q8_0") in.kv = KvType::kQ8_0;
  else return fail("plan", invalid_argument("--kv-type: unknown KV cache type '" + fl.kv + "' (f16, q8_0)"));
  auto mode = parse_mode(fl.mode);
  if (!mode.ok()) return fail("plan", mode.status());
  in.mode = *mode;
  if (fl.batch == 0) return fail("plan", invalid_argument("--batch must be at least 1"));
  if (fl.ctx && *fl.ctx == 0) return fail("plan", invalid_argument("-c/--ctx-size must be at least 1"));

  in.device_bytes = detected_device_bytes();
  if (!fl.vram.empty()) {
    auto v = parse_size(fl.vram, "--vram");
    if (!v.ok()) return fail("plan", v.status());
    in.device_bytes = *v;
  }
  auto ram = fl.ram.empty() ? host_memory_total() : parse_size(fl.ram, "--ram");
  if (!ram.ok()) return fail("plan", ram.status());
  if (*ram == 0) return fail("plan", invalid_argument("--ram must be positive"));
  in.host_bytes = *ram;
  if (!fl.pin_budget.empty() && fl.pin_budget != "auto") {
    auto b = parse_size(fl.pin_budget, "--pin-budget");
    if (!b.ok()) return fail("plan", b.status());
    in.pin_budget = *b;
  }
  if (fl.expert_cache != "auto") {
    auto c = parse_size(fl.expert_cache, "--expert-cache");
    if (!c.ok()) return fail("plan", c.status());
    in.expert_cache_bytes = *c;
  }
  in.hw = default_hw_profile();
  if (!fl.hw_profile.empty()) {
    auto hw = read_hw_profile(fl.hw_profile);
    if (!hw.ok()) return fail("plan", hw.status());
    in.hw = *hw;
  }
  std::optional<PopularityProfile> popularity;
  if (!fl.popularity.empty()) {
    auto pop = read_popularity(fl.popularity);
    if (!pop.ok()) return fail("plan", pop.status());
    popularity = std::move(*pop);
    in.popularity = &*popularity;
  }
  if (fl.threads) {
    if (*fl.threads == 0) return fail("plan", invalid_argument("-t must be at least 1"));
    in.cpu_threads = *fl.threads;
  }

  auto file = gguf::GgufFile::open(fl.path);
  if (!file.ok()) return fail("plan", file.status());
  auto geometry = read_expert_geometry(*file);
  if (!geometry.ok()) return fail("plan", geometry.status());
  if (geometry->layers.empty()) {
    return fail("plan", invalid_argument(fl.path + " has no routed expert tensors (a dense model): nothing to plan"));
  }
  auto sizes = read_model_sizes(*file);
  if (!sizes.ok()) return fail("plan", sizes.status());
  in.geometry = std::move(*geometry);
  in.model = *sizes;
  in.batch = fl.batch;
  in.ctx = fl.ctx.value_or(std::min(sizes->context_length, kDefaultMaxCtx));

  auto plan = make_plan(in);
  if (!plan.ok()) return fail("plan", plan.status());
  if (!fl.ctx) {
    plan->notes.push_back("ctx: the model's " + std::to_string(sizes->context_length) + " capped at " +
                          std::to_string(kDefaultMaxCtx) + " (-c/--ctx-size to change)");
  }
  if (fl.vram.empty()) plan->notes.push_back("device memory: none detected by this build (--vram to plan for a GPU)");
  if (fl.ram.empty()) plan->notes.push_back("host memory: MemTotal of /proc/meminfo (--ram to change)");
  if (fl.json) std::printf("%s\n", plan_to_json(*plan).c_str());
  else std::printf("%s: %s\n%s", fl.path.c_str(), human_bytes(file->file_size()).c_str(), plan_to_text(*plan).c_str());
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  app.add_option("-m,--model", f->path, "GGUF file")->required();
  app.add_option("--vram", f->vram, "device memory (e.g. 16GiB, 24G; default: detected, 0 without a GPU)");
  app.add_option("--ram", f->ram, "host memory (default: MemTotal of /proc/meminfo)");
  app.add_option("--pin-budget", f->pin_budget, "pinned host memory for expert layers (default auto: 50% of RAM)");
  app.add_option("-c,--ctx-size,--ctx", f->ctx, "context length (default: the model's, capped at 32768)");
  app.add_option("--kv-type,--kv", f->kv, "KV cache type: f16 or q8_0");
  app.add_option("--batch", f->batch, "sequences decoded together");
  app.add_option("--expert-cache", f->expert_cache, "GPU expert cache size, or auto (what is left of the device)");
  app.add_option("--hw-profile", f->hw_profile, "measured hardware profile (moetier hwprofile; default: assumed)");
  app.add_option("--popularity", f->popularity, "expert popularity profile (moetier profile) for the hit rate");
  app.add_option("--moe-mode", f->mode, "auto, cpu, stream or hybrid");
  app.add_option("-t,--threads", f->threads, "CPU threads (default: the hardware profile's)");
  app.add_flag("--json", f->json, "machine-readable output (keys documented in docs/CLI.md)");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
