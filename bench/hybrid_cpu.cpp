// moetier_hybrid_cpu: the CPU's share of a hybrid GPU decode step, alone.
//
// In hybrid decode (cuda/tiering.h) each MoE layer-step hands the CPU the cold experts of
// one token: the host waits for the device's router, then computes `expert_outputs` for
// those experts on the pool while the device computes the hot ones. This runs that call
// over every MoE layer of a model (so the bytes come from memory, not the cache), with a
// busy gap before each call standing in for the device's part of the layer (the pool's
// workers must wake up after it), and reports microseconds per layer-call and the GB/s of
// expert bytes read, against the host bandwidth `moetier_membw` measures.
//
//   moetier_hybrid_cpu -m F [-t T] [--experts N] [--gap-us G] [-n TOKENS] [--spin-us S]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/layers.h"
#include "model/model.h"

namespace {

struct Flags {
  std::string model;
  int threads = 0;
  uint32_t experts = 6;   // cold experts per layer-step (25% uniform on a top-8 model: ~5.9)
  double gap_us = 60.0;   // the device's part of a layer, busy-waited on this thread
  int tokens = 32;
  int spin_us = -1;       // the pool's spin before sleeping (-1: its default)
  uint64_t seed = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run(const Flags& f) {
  mt::LoadOptions lo;
  lo.n_threads = f.threads;
  lo.interleave_experts_only = true;  // as the GPU tiering loads its host side
  auto loaded = mt::Model::load(f.model, lo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "moetier_hybrid_cpu: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const mt::Model& model = **loaded;
  if (FILE* mi = std::fopen("/proc/meminfo", "r"); mi != nullptr) {  // are the copies on huge pages?
    char line[256];
    while (std::fgets(line, sizeof line, mi) != nullptr) {
      if (std::string(line).rfind("AnonHugePages", 0) == 0) std::printf("%s", line);
    }
    std::fclose(mi);
  }
  if (f.spin_us >= 0) model.pool().set_spin_us(f.spin_us);
  const mt::HParams& hp = model.hparams();
  const size_t E = hp.n_embd;
  std::vector<uint32_t> moe_layers;
  for (uint32_t l = 0; l < hp.n_layer; ++l) if (model.weights().layers[l].is_moe()) moe_layers.push_back(l);
  if (moe_layers.empty() || f.experts == 0 || f.experts > hp.n_expert) {
    std::fprintf(stderr, "moetier_hybrid_cpu: no MoE layers, or --experts not in 1..%u\n", hp.n_expert);
    return 1;
  }
  std::mt19937_64 rng(f.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> h(E), out(f.experts * E);
  for (float& v : h) v = normal(rng);
  std::vector<uint32_t> ids(hp.n_expert);
  std::iota(ids.begin(), ids.end(), 0u);
  std::vector<mt::ExpertJob> jobs(f.experts);
  std::vector<double> call_us;
  double bytes = 0, busy_s = 0;
  for (int tok = -2; tok < f.tokens; ++tok) {  // two warm-up tokens
    for (uint32_t l : moe_layers) {
      const mt::LayerWeights& w = model.weights().layers[l];
      std::shuffle(ids.begin(), ids.end(), rng);
      for (uint32_t i = 0; i < f.experts; ++i) jobs[i] = {ids[i], 0};
      const auto gap = std::chrono::steady_clock::now();
      while (seconds_since(gap) * 1e6 < f.gap_us) {
      }
      const auto t0 = std::chrono::steady_clock::now();
      mt::expert_outputs(w, h.data(), 1, E, jobs, out.data(), model.pool());
      const double s = seconds_since(t0);
      if (tok < 0) continue;
      call_us.push_back(s * 1e6);
      busy_s += s;
      const double per = static_cast<double>(w.up_exps.matrix_bytes + w.down_exps.matrix_bytes) +
                         (w.gate_exps.present() ? static_cast<double>(w.gate_exps.matrix_bytes) : 0.0);
      bytes += per * f.experts;
    }
  }
  std::sort(call_us.begin(), call_us.end());
  const auto pct = [&](double q) { return call_us[static_cast<size_t>(q * static_cast<double>(call_us.size() - 1))]; };
  std::printf("threads %d, %u experts per layer-call, gap %.0f us, %zu calls: median %.1f us (p10 %.1f, p90 %.1f), "
              "%.2f MB per call, %.1f GB/s while computing\n",
              model.pool().size(), f.experts, f.gap_us, call_us.size(), pct(0.5), pct(0.1), pct(0.9),
              bytes / static_cast<double>(call_us.size()) * 1e-6, bytes / busy_s * 1e-9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moetier_hybrid_cpu: the CPU's experts of a hybrid decode step"};
  Flags f;
  app.add_option("-m,--model", f.model, "GGUF model (MoE)")->required();
  app.add_option("-t,--threads", f.threads, "threads (0: all)");
  app.add_option("--experts", f.experts, "experts per layer-call");
  app.add_option("--gap-us", f.gap_us, "busy gap before each call (the device's part of the layer)");
  app.add_option("-n,--tokens", f.tokens, "tokens (each: one call per MoE layer)");
  app.add_option("--spin-us", f.spin_us, "the pool workers' spin before sleeping, microseconds");
  app.add_option("--seed", f.seed, "expert choice seed");
  CLI11_PARSE(app, argc, argv);
  return run(f);
}
