// A Trace that keeps what the CUDA tests compare: each (layer, position)'s selected
// experts and weights, and (the CPU's Session reports them) the router's scores.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layers.h"

namespace mt::cuda::test {

class Routing : public Trace {
 public:
  void routing(uint32_t layer, uint32_t pos, std::span<const int32_t> e, std::span<const float> w) override {
    sel[{layer, pos}] = {std::vector<int32_t>(e.begin(), e.end()), std::vector<float>(w.begin(), w.end())};
  }
  void tensor(const char* name, uint32_t layer, uint32_t pos, std::span<const float> row) override {
    if (std::string(name) == "ffn_moe_probs") probs[{layer, pos}].assign(row.begin(), row.end());  // the CPU's scores
  }
  std::map<std::pair<uint32_t, uint32_t>, std::pair<std::vector<int32_t>, std::vector<float>>> sel;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<float>> probs;
};

}  // namespace mt::cuda::test
