// The host side of most CUDA tests: a tiny synthetic model of an architecture
// (synth::tiny_for) in a weight type or mix, written to a temporary GGUF named after `tag`
// and loaded on the CPU.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/arch.h"
#include "model/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace mt::cuda::test {

inline StatusOr<std::unique_ptr<Model>> load_tiny(Arch arch, const std::string& quant, const std::string& tag) {
  synth::SynthConfig cfg = synth::tiny_for(arch);
  auto mix = synth::parse_quant_mix(quant);
  if (!mix.ok()) return mix.status();
  cfg.quant = *mix;
  const std::string path = mt::test::temp_path(tag + "-" + std::string(arch_info(arch).name) + "-" + quant + ".gguf");
  if (auto written = synth::write_model(cfg, {path, false}); !written.ok()) return written.status();
  return Model::load(path, {0, false});
}

}  // namespace mt::cuda::test
