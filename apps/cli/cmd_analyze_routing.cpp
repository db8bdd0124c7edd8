// moetier analyze-routing: the granule trade curve of a routing record (seed 003,
// experts/granule.h): per experts-per-chunk E and packing, the waste, resident and
// transfer MiB per layer-step and the selectivity, and the E with the least resident.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "apps/cli/commands.h"
#include "apps/cli/sizes.h"
#include "experts/geometry.h"
#include "experts/granule.h"
#include "experts/routing_trace.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

struct AnalyzeFlags {
  std::string trace, granule = "2MiB", expert_bytes, model;
  std::vector<uint32_t> chunk_sizes;
  bool json = false;
};

int run(const AnalyzeFlags& f) {
  if (f.expert_bytes.empty() == f.model.empty()) {
    return fail("analyze-routing", invalid_argument("give exactly one of --expert-bytes and -m"));
  }
  GranuleParams params;
  params.experts_per_chunk = f.chunk_sizes;
  auto granule = parse_size(f.granule, "--granule");
  if (!granule.ok()) return fail("analyze-routing", granule.status());
  params.granule_bytes = *granule;
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
  }
  auto trace = read_routing_trace(f.trace);
  if (!trace.ok()) return fail("analyze-routing", trace.status());
  auto curve = granule_curve(*trace, params);
  if (!curve.ok()) return fail("analyze-routing", curve.status());
  std::fputs(f.json ? granule_curve_json(*curve).c_str() : granule_curve_table(*curve).c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_analyze_routing(CLI::App& app) {
  auto f = std::make_shared<AnalyzeFlags>();
  app.add_option("--trace", f->trace, "routing record (JSON lines of run --record-routing / logits --routing)")
      ->required();
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
