// moetier inspect FILE [--json]: metadata, tensor table and per-layer expert geometry.
// The JSON keys are a stable interface, documented in docs/CLI.md.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>

#include "apps/cli/commands.h"
#include "core/log.h"
#include "experts/geometry.h"
#include "gguf/reader.h"

namespace mt::cli {
namespace {

using nlohmann::json;

constexpr uint64_t kArrayHead = 8;

json value_json(const gguf::Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* f = std::get_if<double>(&v.data)) return std::isfinite(*f) ? json(*f) : json(std::to_string(*f));
  if (const auto* b = std::get_if<bool>(&v.data)) return *b;
  // Invalid UTF-8 would make the JSON dump throw: replace it.
  if (const auto* s = std::get_if<std::string_view>(&v.data)) return json(std::string(*s));
  const gguf::Array* a = v.array();
  json head = json::array();
  for (uint64_t i = 0; i < std::min(a->count, kArrayHead); ++i) {
    if (a->elem_type == gguf::ValueType::kString) head.push_back(std::string(a->strings[i]));
    else if (a->elem_type == gguf::ValueType::kArray) head.push_back(value_json(a->arrays[i]));
    else if (a->elem_type == gguf::ValueType::kF32 || a->elem_type == gguf::ValueType::kF64) head.push_back(a->float_at(i));
    else if (a->elem_type == gguf::ValueType::kBool) head.push_back(a->raw[i] != 0);
    else head.push_back(a->int_at(i));
  }
  return {{"array_type", gguf::value_type_name(a->elem_type)}, {"count", a->count}, {"head", head}};
}

json proj_json(const ProjGeometry& p) {
  if (!p.present) return nullptr;
  return {{"type", type_name(p.type)}, {"bytes_per_expert", p.bytes_per_expert}, {"n_in", p.n_in},
          {"n_out", p.n_out}, {"tensor", p.tensor}};
}

json experts_json(const ExpertGeometry& g) {
  json layers = json::array();
  for (const LayerExpertGeometry& l : g.layers) {
    layers.push_back({{"layer", l.layer}, {"gate", proj_json(l.gate())}, {"up", proj_json(l.up())},
                      {"down", proj_json(l.down())}, {"bytes_per_expert", l.bytes_per_expert()},
                      {"bank_bytes", l.bank_bytes()}, {"merged_gate_up", l.merged_gate_up}});
  }
  json groups = json::array();
  for (const GeometryGroup& gr : g.groups) {
    groups.push_back({{"gate_bytes", gr.bytes[0]}, {"up_bytes", gr.bytes[1]}, {"down_bytes", gr.bytes[2]},
                      {"bytes_per_expert", gr.bytes_per_expert()}, {"types", gr.types}, {"layers", gr.layers}});
  }
  return {{"n_expert", g.n_expert}, {"n_moe_layers", g.layers.size()}, {"layers", layers}, {"groups", groups},
          {"max_gate_bytes", g.max_bytes[0]}, {"max_up_bytes", g.max_bytes[1]}, {"max_down_bytes", g.max_bytes[2]},
          {"expert_bank_bytes_compact", g.compact_bytes}, {"expert_bank_bytes_padded", g.padded_bytes}};
}

json inspect_json(const std::string& path, const gguf::GgufFile& f, const ExpertGeometry& g) {
  json meta = json::object();
  for (const gguf::KeyValue& kv : f.metadata()) meta[std::string(kv.key)] = value_json(kv.value);
  json tensors = json::array();
  std::map<std::string, uint64_t> by_type;
  uint64_t n_params = 0, tensor_bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    json ne = json::array();
    for (uint32_t d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
    tensors.push_back({{"name", std::string(t.name)}, {"type", type_name(t.type)}, {"ne", ne},
                       {"offset", t.offset}, {"bytes", t.nbytes}});
    by_type[type_name(t.type)] += t.nbytes;
    n_params += t.n_elements();
    tensor_bytes += t.nbytes;
  }
  auto arch = f.get_string("general.architecture");
  return {{"file", path},
          {"file_bytes", f.file_size()},
          {"gguf_version", f.version()},
          {"alignment", f.alignment()},
          {"data_offset", f.data_offset()},
          {"architecture", arch.ok() ? json(std::string(*arch)) : json(nullptr)},
          {"n_tensors", f.tensors().size()},
          {"n_params", n_params},
          {"tensor_bytes", tensor_bytes},
          {"tensor_bytes_by_type", by_type},
          {"metadata", meta},
          {"tensors", tensors},
          {"experts", g.layers.empty() ? json(nullptr) : experts_json(g)},
          {"expert_bank_bytes_compact", g.compact_bytes},
          {"expert_bank_bytes_padded", g.padded_bytes}};
}

void print_text(const std::string& path, const gguf::GgufFile& f, const ExpertGeometry& g, bool all_tensors) {
  std::printf("%s: GGUF v%u, %s, %zu tensors, %zu metadata keys, alignment %u, data at %llu\n", path.c_str(),
              f.version(), human_bytes(f.file_size()).c_str(), f.tensors().size(), f.metadata().size(), f.alignment(),
              static_cast<unsigned long long>(f.data_offset()));
  std::printf("\nmetadata:\n");
  for (const gguf::KeyValue& kv : f.metadata()) {
    std::printf("  %-48s %-7s %s\n", std::string(kv.key).c_str(), gguf::value_type_name(kv.value.type),
                kv.value.summary(72).c_str());
  }
  std::printf("\ntensors:\n");
  size_t shown = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!all_tensors && shown == 40) {
      std::printf("  ... %zu more (--all-tensors shows them)\n", f.tensors().size() - shown);
      break;
    }
    std::string dims;
    for (uint32_t d = 0; d < t.n_dims; ++d) dims += (d ? " x " : "") + std::to_string(t.ne[d]);
    std::printf("  %-40s %-7s %-28s %12s\n", std::string(t.name).c_str(), type_name(t.type), dims.c_str(),
                human_bytes(t.nbytes).c_str());
    ++shown;
  }
  if (g.layers.empty()) {
    std::printf("\nno expert tensors (dense model)\n");
    return;
  }
  std::printf("\nexperts: %zu MoE layers x %u experts\n", g.layers.size(), g.n_expert);
  std::printf("  %-6s %-8s %-8s %-8s %14s %14s %14s %14s\n", "layer", "gate", "up", "down", "gate B/exp", "up B/exp",
              "down B/exp", "B/expert");
  for (const LayerExpertGeometry& l : g.layers) {
    std::printf("  %-6u %-8s %-8s %-8s %14llu %14llu %14llu %14llu\n", l.layer,
                l.gate().present ? type_name(l.gate().type) : "-", type_name(l.up().type), type_name(l.down().type),
                static_cast<unsigned long long>(l.gate().bytes_per_expert),
                static_cast<unsigned long long>(l.up().bytes_per_expert),
                static_cast<unsigned long long>(l.down().bytes_per_expert),
                static_cast<unsigned long long>(l.bytes_per_expert()));
  }
  std::printf("\ngeometry groups (one GPU cache pool each):\n");
  for (const GeometryGroup& gr : g.groups) {
    std::printf("  %-22s %s per expert, %zu layers\n", gr.types.c_str(), human_bytes(gr.bytes_per_expert()).c_str(),
                gr.layers.size());
  }
  std::printf("\nhost expert bank: compact %llu bytes (%s), padded to the largest stride %llu bytes (%s)\n",
              static_cast<unsigned long long>(g.compact_bytes), human_bytes(g.compact_bytes).c_str(),
              static_cast<unsigned long long>(g.padded_bytes), human_bytes(g.padded_bytes).c_str());
}

struct InspectFlags {
  std::string path;
  bool json = false;
  bool all_tensors = false;
};

int run(const InspectFlags& flags) {
  auto file = gguf::GgufFile::open(flags.path);
  if (!file.ok()) {
    std::fprintf(stderr, "moetier inspect: %s\n", file.status().to_string().c_str());
    return 1;
  }
  auto geometry = read_expert_geometry(*file);
  if (!geometry.ok()) {
    std::fprintf(stderr, "moetier inspect: %s: %s\n", flags.path.c_str(), geometry.status().to_string().c_str());
    return 1;
  }
  if (flags.json) {
    std::printf("%s\n", inspect_json(flags.path, *file, *geometry).dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    print_text(flags.path, *file, *geometry, flags.all_tensors);
  }
  return 0;
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  app.add_option("file", f->path, "GGUF file")->required();
  app.add_flag("--json", f->json, "machine-readable output (keys documented in docs/CLI.md)");
  app.add_flag("--all-tensors", f->all_tensors, "list every tensor in the text output");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
