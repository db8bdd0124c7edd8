#include "cpu/kernels.h"

#include <optional>

#include "core/check.h"
#include "cpu/register.h"

namespace mt::cpu {
namespace {

// Each level's table starts from the one below it: the families of a level overwrite
// only the entries they speed up, so every entry is always the best one available.
void fill(KernelTable& t, Isa level) {
  register_simple_scalar(t);
  register_k_quants_scalar(t);
  if (level >= Isa::kAvx2) {
    register_simple_avx2(t);
    register_k_quants_avx2(t);
    register_gemm_avx2(t);
  }
  if (level >= Isa::kAvx512) {
    register_simple_avx512(t);
    register_k_quants_avx512(t);
    register_gemm_avx512(t);
    register_repack_avx512(t);
  }
}

// Built on first use only: the registration functions of a level live in translation
// units compiled with that level's flags, so a level above the hardware's must never run.
template <Isa kLevel>
const KernelTable& table() {
  static const KernelTable t = [] {
    KernelTable k{};
    k.isa = kLevel;
    fill(k, kLevel);
    return k;
  }();
  return t;
}

}  // namespace

const KernelTable& kernels_for(Isa isa) {
  static const Isa hardware = detect_hardware_isa();
  MT_CHECK_MSG(isa <= hardware, "kernel table above the CPU's level requested");
  switch (isa) {
    case Isa::kScalar: return table<Isa::kScalar>();
    case Isa::kAvx2: return table<Isa::kAvx2>();
    case Isa::kAvx512: return table<Isa::kAvx512>();
    case Isa::kAvx512Vnni: return table<Isa::kAvx512Vnni>();
  }
  MT_CHECK_MSG(false, "unknown Isa");
  return table<Isa::kScalar>();
}

const KernelTable& kernels() {
  static const KernelTable& t = kernels_for(active_isa());
  return t;
}

void gemm_by_vec_dot(VecDotFn dot, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                     size_t act_stride, int64_t n_tok, float* y, int64_t y_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tok; ++t) y[t * y_stride + r] = dot(n, wb + r * w_stride, ab + t * act_stride);
  }
}

QuantType activation_type(QuantType weight) {
  switch (weight) {
    case QuantType::F32: return QuantType::F32;
    case QuantType::F16: return QuantType::F16;
    case QuantType::BF16: return QuantType::BF16;
    case QuantType::Q4_1: case QuantType::Q5_1: return QuantType::Q8_1;
    case QuantType::Q2_K: case QuantType::Q3_K: case QuantType::Q4_K: case QuantType::Q5_K:
    case QuantType::Q6_K: case QuantType::IQ4_XS: case QuantType::Q8_K:
      return QuantType::Q8_K;
    default: return QuantType::Q8_0;  // Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 (and types without a dot)
  }
}

size_t activation_row_bytes(QuantType weight, int64_t n) {
  MT_CHECK(n >= 0);
  const std::optional<uint64_t> bytes = row_bytes(activation_type(weight), static_cast<uint64_t>(n));
  MT_CHECK_MSG(bytes.has_value(), "activation row length is not a multiple of the block size");
  return static_cast<size_t>(*bytes);
}

}  // namespace mt::cpu
