// moetier analyze-routing: the granule trade curve of a routing record or of a generated
// stream (--routing synth:..., experts/routing_gen.h) (seed 003, experts/granule.h): per
// experts-per-chunk E and packing, the waste, resident and transfer MiB per layer-step and
// the selectivity, and the E with the least resident; first the routing's temporal
// locality (reuse at the next token, within 8 tokens, median reuse distance, experts
// touched per layer in 75 tokens).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "apps/cli/commands.h"
#include "apps/cli/model_sizes.h"
#include "apps/cli/sizes.h"
#include "experts/geometry.h"
#include "experts/granule.h"
#include "experts/routing_gen.h"
#include "experts/routing_trace.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

struct AnalyzeFlags {
  std::string trace, routing, granule = "2MiB", expert_bytes, model;
  std::vector<uint32_t> chunk_sizes;
  bool json = false;
};

// The routing: a record (--trace, --routing trace:FILE) or a generated stream whose
// geometry is the model's (-m) or the spec's (a preset, experts=, top-k=; 48 layers).
// `window`: the generator's window, else 8 (what the locality line measures within).
StatusOr<RoutingTrace> load_routing(const AnalyzeFlags& f, const ExpertGeometry* geo, uint32_t top_k, uint32_t& window) {
  window = 8;
  if (f.trace.empty() == f.routing.empty()) return invalid_argument("give exactly one of --trace FILE and --routing");
  if (!f.trace.empty()) return read_routing_trace(f.trace);
  MT_ASSIGN_OR_RETURN(RoutingSource src, parse_routing_source(f.routing));
  if (!src.synthetic) return read_routing_trace(src.path);
  RoutingGenParams& p = src.gen.params;
  std::vector<uint32_t> block_of;
  if (geo) {
    if (src.gen.geometry_given && (p.n_expert != geo->n_expert || p.top_k != top_k)) {
      return invalid_argument("--routing: the stream is for " + std::to_string(p.n_expert) + " experts top-" +
                              std::to_string(p.top_k) + ", the model has " + std::to_string(geo->n_expert) + " top-" +
                              std::to_string(top_k));
    }
    p.n_expert = geo->n_expert;
    p.top_k = top_k;
    p.n_layers = static_cast<uint32_t>(geo->layers.size());
    for (const LayerExpertGeometry& l : geo->layers) block_of.push_back(l.layer);
  }
  MT_RETURN_IF_ERROR(check_routing_gen_params(p));
  window = p.window;
  return generate_trace(p, src.gen.tokens, block_of);
}

int run(const AnalyzeFlags& f) {
  if (f.expert_bytes.empty() == f.model.empty()) {
    return fail("analyze-routing", invalid_argument("give exactly one of --expert-bytes and -m"));
  }
  GranuleParams params;
  params.experts_per_chunk = f.chunk_sizes;
  auto granule = parse_size(f.granule, "--granule");
  if (!granule.ok()) return fail("analyze-routing", granule.status());
  params.granule_bytes = *granule;
  ExpertGeometry geometry;
  uint32_t top_k = 0;
  if (!f.expert_bytes.empty()) {
    auto b = parse_size(f.expert_bytes, "--expert-bytes");
    if (!b.ok()) return fail("analyze-routing", b.status());
    if (*b == 0) return fail("analyze-routing", invalid_argument("--expert-bytes must be positive"));
    params.expert_bytes = *b;
  } else {
    auto file = gguf::GgufFile::open(f.model);
    if (!file.ok()) return fail("analyze-routing", file.status());
    auto geo = read_expert_geometry(*file);
    if (!geo.ok()) return fail("analyze-routing", geo.status());
    if (geo->layers.empty()) return fail("analyze-routing", invalid_argument(f.model + " has no expert layers"));
    params.expert_bytes_by_layer.assign(geo->layers.back().layer + 1, 0);
    for (const LayerExpertGeometry& l : geo->layers) params.expert_bytes_by_layer[l.layer] = l.bytes_per_expert();
    params.n_expert = geo->n_expert;
    auto sizes = read_model_sizes(*file);
    if (!sizes.ok()) return fail("analyze-routing", sizes.status());
    geometry = std::move(*geo);
    top_k = sizes->n_expert_used;
  }
  uint32_t window = 8;
  auto trace = load_routing(f, f.model.empty() ? nullptr : &geometry, top_k, window);
  if (!trace.ok()) return fail("analyze-routing", trace.status());
  auto curve = granule_curve(*trace, params);
  if (!curve.ok()) return fail("analyze-routing", curve.status());
  const LocalityStats loc = measure_locality(*trace, window);
  if (f.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(granule_curve_json(*curve));
    j["locality"] = {{"reuse", loc.reuse}, {"window", window}, {"within", loc.within}, {"median_reuse_distance", loc.median_distance},
                     {"touched_per_75_tokens", loc.touched > 0 ? nlohmann::ordered_json(loc.touched) : nullptr}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    char touched[64] = "fewer than 75 tokens per layer";
    if (loc.touched > 0) std::snprintf(touched, sizeof touched, "%.1f experts touched per layer in 75 tokens", loc.touched);
    std::printf("locality: reuse at the next token %.3f, within %u tokens %.3f, median reuse distance %.0f, %s\n%s",
                loc.reuse, window, loc.within, loc.median_distance, touched, granule_curve_table(*curve).c_str());
  }
  return 0;
}

}  // namespace

Runner add_analyze_routing(CLI::App& app) {
  auto f = std::make_shared<AnalyzeFlags>();
  app.add_option("--trace", f->trace, "routing record (JSON lines of run --record-routing / logits --routing)");
  app.add_option("--routing", f->routing,
                 "instead of --trace: synth:KEY=VALUE,... (a generated stream, preset=qwen3-30b|256|512, reuse, window, "
                 "within, skew, seed, tokens, experts, top-k) or trace:FILE");
  app.add_option("--granule", f->granule, "commit granule (default 2MiB, CUDA's VMM granule)");
  app.add_option("--expert-bytes", f->expert_bytes, "bytes of one expert, gate + up + down (e.g. 786432, 0.75MiB)");
  app.add_option("-m,--model", f->model, "GGUF model: each layer's expert bytes from its tensor geometry");
  app.add_option("-E,--experts-per-chunk", f->chunk_sizes,
                 "E values of the curve (default: powers of two, the most per granule, the whole bank)")
      ->delimiter(',');
  app.add_flag("--json", f->json, "print the curve as JSON");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
