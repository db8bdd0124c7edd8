#include "model/arch.h"

#include <array>

namespace mt {
namespace {

constexpr std::array kArchs = {
    //       arch             name        rope               qk norm            renorm shared bias  ff_key tied
    ArchInfo{Arch::kQwen3Moe, "qwen3moe", RopeStyle::kNeox, QkNorm::kPerHead,   true,  false, false, true,  true},
    ArchInfo{Arch::kQwen2Moe, "qwen2moe", RopeStyle::kNeox, QkNorm::kNone,      false, true,  true,  true,  false},
    ArchInfo{Arch::kLlama,    "llama",    RopeStyle::kNorm, QkNorm::kNone,      true,  false, false, false, true},
    ArchInfo{Arch::kOlmoe,    "olmoe",    RopeStyle::kNeox, QkNorm::kFullWidth, false, false, false, false, false},
};

}  // namespace

const ArchInfo& arch_info(Arch arch) { return kArchs[static_cast<size_t>(arch)]; }

std::optional<Arch> arch_from_name(std::string_view name) {
  for (const ArchInfo& a : kArchs) {
    if (a.name == name) return a.arch;
  }
  return std::nullopt;
}

std::span<const ArchInfo> all_archs() { return kArchs; }

}  // namespace mt
