// Expert geometry: per MoE layer, the quant type and bytes of one expert's gate, up and
// down matrices, read from tensor metadata alone (no tensor data touched).
//
// In GGUF an expert tensor `blk.L.ffn_{gate,up,down}_exps.weight` has dims
// (n_in, n_out, n_expert); expert e is one contiguous slab at e * bytes_per_expert. So
// the compact host bank of a layer is the mmap itself, every layer at its own stride.
// A padded bank (every layer at the largest stride of each projection, as seed 000's
// unified layout did) is what moetier avoids; both totals are reported exactly.
// Layers whose (gate, up, down) byte tuple is equal form one geometry group: the GPU
// expert cache carves one slot pool per group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/reader.h"
#include "quant/types.h"

namespace mt {

enum class ExpertProj { kGate = 0, kUp = 1, kDown = 2 };
constexpr int kExpertProjCount = 3;
const char* expert_proj_name(ExpertProj p);  // "gate", "up", "down"

struct ProjGeometry {
  bool present = false;       // false: ungated experts (no gate tensor)
  QuantType type = QuantType::F32;
  uint64_t n_in = 0;          // ne[0], the reduction dimension
  uint64_t n_out = 0;         // ne[1]
  uint64_t bytes_per_expert = 0;
  std::string tensor;         // tensor name in the file
  uint64_t offset_in_file = 0;  // absolute byte offset of expert 0
};

struct LayerExpertGeometry {
  uint32_t layer = 0;         // block index in the GGUF
  uint32_t n_expert = 0;
  bool merged_gate_up = false;  // one `ffn_gate_up_exps` tensor holds gate then up
  ProjGeometry proj[kExpertProjCount];
  const ProjGeometry& gate() const { return proj[0]; }
  const ProjGeometry& up() const { return proj[1]; }
  const ProjGeometry& down() const { return proj[2]; }
  uint64_t bytes_per_expert() const {
    return proj[0].bytes_per_expert + proj[1].bytes_per_expert + proj[2].bytes_per_expert;
  }
  uint64_t bank_bytes() const { return bytes_per_expert() * n_expert; }
};

// Layers sharing one (gate, up, down) bytes-per-expert tuple.
struct GeometryGroup {
  uint64_t bytes[kExpertProjCount] = {0, 0, 0};
  std::vector<uint32_t> layers;
  std::string types;          // "q4_K/q4_K/q6_K" (gate/up/down) of the first layer
  uint64_t bytes_per_expert() const { return bytes[0] + bytes[1] + bytes[2]; }
};

struct ExpertGeometry {
  std::vector<LayerExpertGeometry> layers;   // MoE layers only, ascending block index
  std::vector<GeometryGroup> groups;         // by descending bytes per expert
  uint64_t max_bytes[kExpertProjCount] = {0, 0, 0};  // largest stride of each projection
  uint64_t compact_bytes = 0;   // sum over layers of n_expert * bytes_per_expert
  uint64_t padded_bytes = 0;    // sum over layers of n_expert * (max gate + max up + max down)
  uint32_t n_expert = 0;        // experts per layer (the same in every layer)
};

// Finds every layer's expert tensors and checks that they agree: 3-D, the same expert
// count in all projections and layers (and equal to `{arch}.expert_count` when present),
// gate/up (n_embd, n_ff) and down (n_ff, n_embd) shapes that fit together.
StatusOr<ExpertGeometry> read_expert_geometry(const gguf::GgufFile& file);

}  // namespace mt
