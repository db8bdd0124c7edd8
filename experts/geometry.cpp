#include "experts/geometry.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>

namespace mt {
namespace {

// Parses "blk.<L>.<rest>" into L and rest.
bool split_block_name(std::string_view name, uint32_t* layer, std::string_view* rest) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, *layer);
  if (ec != std::errc() || ptr != name.data() + dot) return false;
  *rest = name.substr(dot + 1);
  return true;
}

ProjGeometry proj_from(const gguf::GgufFile& file, const gguf::TensorInfo& t) {
  ProjGeometry p;
  p.present = true;
  p.type = t.type;
  p.n_in = t.ne[0];
  p.n_out = t.ne[1];
  p.bytes_per_expert = t.matrix_bytes();
  p.tensor = std::string(t.name);
  p.offset_in_file = file.data_offset() + t.offset;
  return p;
}

Status bad(const std::string& tensor, const std::string& what) {
  return data_loss("expert tensor '" + tensor + "': " + what);
}

}  // namespace

const char* expert_proj_name(ExpertProj p) {
  switch (p) {
    case ExpertProj::kGate: return "gate";
    case ExpertProj::kUp: return "up";
    case ExpertProj::kDown: return "down";
  }
  return "?";
}

StatusOr<ExpertGeometry> read_expert_geometry(const gguf::GgufFile& file) {
  // NextN / MTP layers (after block_count - nextn_predict_layers) are not run by plain
  // decoding: their experts are not tiered.
  uint32_t first_nextn = ~0u;
  if (auto arch = file.get_string("general.architecture"); arch.ok()) {
    const std::string p = std::string(*arch) + ".";
    MT_ASSIGN_OR_RETURN(uint32_t n_nextn, file.get_u32_or(p + "nextn_predict_layers", 0));
    MT_ASSIGN_OR_RETURN(uint32_t n_block, file.get_u32_or(p + "block_count", 0));
    if (n_nextn > 0 && n_nextn < n_block) first_nextn = n_block - n_nextn;
  }
  std::map<uint32_t, LayerExpertGeometry> by_layer;
  for (const gguf::TensorInfo& t : file.tensors()) {
    uint32_t layer = 0;
    std::string_view rest;
    if (!split_block_name(t.name, &layer, &rest)) continue;
    if (layer >= first_nextn) continue;
    int slot = -1;
    bool merged = false;
    if (rest == "ffn_gate_exps.weight") slot = 0;
    else if (rest == "ffn_up_exps.weight") slot = 1;
    else if (rest == "ffn_down_exps.weight") slot = 2;
    else if (rest == "ffn_gate_up_exps.weight") merged = true;
    else continue;
    const std::string name(t.name);
    if (t.n_dims != 3) return bad(name, "has " + std::to_string(t.n_dims) + " dims, expected 3 (n_in, n_out, n_expert)");
    if (t.ne[2] == 0 || t.ne[2] > 65536) return bad(name, "expert count " + std::to_string(t.ne[2]) + " out of range");
    LayerExpertGeometry& g = by_layer[layer];
    g.layer = layer;
    if (merged) {
      if (t.ne[1] % 2 != 0) return bad(name, "merged gate/up width " + std::to_string(t.ne[1]) + " is odd");
      ProjGeometry half = proj_from(file, t);
      half.n_out = t.ne[1] / 2;
      half.bytes_per_expert = t.matrix_bytes() / 2;
      g.proj[0] = half;
      g.proj[1] = half;
      g.merged_gate_up = true;
    } else {
      if (g.proj[slot].present) return bad(name, "given twice for layer " + std::to_string(layer));
      g.proj[slot] = proj_from(file, t);
    }
    uint32_t n_expert = static_cast<uint32_t>(t.ne[2]);
    if (g.n_expert != 0 && g.n_expert != n_expert) {
      return bad(name, "has " + std::to_string(n_expert) + " experts but layer " + std::to_string(layer) +
                           "'s other expert tensors have " + std::to_string(g.n_expert));
    }
    g.n_expert = n_expert;
  }

  ExpertGeometry out;
  uint32_t declared = 0;  // `{arch}.expert_count`, 0 when absent
  if (auto arch = file.get_string("general.architecture"); arch.ok()) {
    MT_ASSIGN_OR_RETURN(declared, file.get_u32_or(std::string(*arch) + ".expert_count", 0));
  }
  for (auto& [layer, g] : by_layer) {
    const std::string where = "layer " + std::to_string(layer);
    if (!g.up().present || !g.down().present) {
      return data_loss(where + ": expert tensors incomplete (ffn_up_exps and ffn_down_exps are required)");
    }
    const uint64_t n_embd = g.up().n_in;
    const uint64_t n_ff = g.up().n_out;
    if (g.gate().present && (g.gate().n_in != n_embd || g.gate().n_out != n_ff)) {
      return data_loss(where + ": ffn_gate_exps shape (" + std::to_string(g.gate().n_in) + ", " +
                       std::to_string(g.gate().n_out) + ") differs from ffn_up_exps (" + std::to_string(n_embd) +
                       ", " + std::to_string(n_ff) + ")");
    }
    if (g.down().n_in != n_ff || g.down().n_out != n_embd) {
      return data_loss(where + ": ffn_down_exps shape (" + std::to_string(g.down().n_in) + ", " +
                       std::to_string(g.down().n_out) + ") does not invert ffn_up_exps (" + std::to_string(n_embd) +
                       ", " + std::to_string(n_ff) + ")");
    }
    if (out.n_expert != 0 && out.n_expert != g.n_expert) {
      return data_loss(where + ": " + std::to_string(g.n_expert) + " experts, other layers have " +
                       std::to_string(out.n_expert));
    }
    out.n_expert = g.n_expert;
    for (int p = 0; p < kExpertProjCount; ++p) out.max_bytes[p] = std::max(out.max_bytes[p], g.proj[p].bytes_per_expert);
    out.layers.push_back(g);
  }
  if (declared != 0 && out.n_expert != 0 && declared != out.n_expert) {
    return data_loss("metadata says " + std::to_string(declared) + " experts but the expert tensors hold " +
                     std::to_string(out.n_expert));
  }

  const uint64_t padded_per_expert = out.max_bytes[0] + out.max_bytes[1] + out.max_bytes[2];
  for (const LayerExpertGeometry& g : out.layers) {
    out.compact_bytes += g.bank_bytes();
    out.padded_bytes += padded_per_expert * g.n_expert;
    GeometryGroup* group = nullptr;
    for (GeometryGroup& gr : out.groups) {
      if (gr.bytes[0] == g.proj[0].bytes_per_expert && gr.bytes[1] == g.proj[1].bytes_per_expert &&
          gr.bytes[2] == g.proj[2].bytes_per_expert) {
        group = &gr;
      }
    }
    if (group == nullptr) {
      GeometryGroup gr;
      for (int p = 0; p < kExpertProjCount; ++p) gr.bytes[p] = g.proj[p].bytes_per_expert;
      gr.types = std::string(g.gate().present ? type_name(g.gate().type) : "-") + "/" + type_name(g.up().type) + "/" +
                 type_name(g.down().type);
      out.groups.push_back(gr);
      group = &out.groups.back();
    }
    group->layers.push_back(g.layer);
  }
  std::stable_sort(out.groups.begin(), out.groups.end(), [](const GeometryGroup& a, const GeometryGroup& b) {
    return a.bytes_per_expert() > b.bytes_per_expert();
  });
  return out;
}

}  // namespace mt
