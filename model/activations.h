// The scalar activations the blocks share, each written once with the operation order
// llama.cpp's CPU backend uses (softplus switches to x above 20, as ggml's does).
#pragma once

#include <cmath>

namespace mt {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace mt
