#include "model/linear.h"

#include <vector>

#include "core/check.h"
#include "cpu/kernels.h"
#include "quant/reference.h"

namespace mt {

QuantType activation_type(QuantType weight) { return cpu::activation_type(weight); }

void round_activation(QuantType weight, const float* x, float* out, int64_t n) {
  const QuantType act = activation_type(weight);
  if (act == QuantType::F32) {
    if (out != x) std::copy(x, x + n, out);
    return;
  }
  std::vector<uint8_t> packed(*row_bytes(act, static_cast<uint64_t>(n)));
  quantize_row(act, x, packed.data(), n);
  dequantize_row(act, packed.data(), out, n);
}

void matmul_reference(const Tensor& w, uint64_t matrix, const float* x_in, int64_t n_tokens, float* y,
                      ThreadPool& pool) {
  const int64_t n_in = static_cast<int64_t>(w.ne[0]);
  const int64_t n_out = static_cast<int64_t>(w.ne[1]);
  MT_CHECK(w.present() && matrix < w.ne[2]);
  std::vector<float> rounded(static_cast<size_t>(n_tokens * n_in));
  for (int64_t t = 0; t < n_tokens; ++t) round_activation(w.type, x_in + t * n_in, &rounded[t * n_in], n_in);
  const float* x = rounded.data();
  pool.parallel_for(n_out, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = begin; r < end; ++r) {
      dequantize_row(w.type, w.row(static_cast<uint64_t>(r), matrix), row.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n_in;
        double acc = 0.0;
        for (int64_t i = 0; i < n_in; ++i) acc += static_cast<double>(row[i]) * xt[i];
        y[t * n_out + r] = static_cast<float>(acc);
      }
    }
  });
}

void matmul(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const cpu::KernelTable& k = cpu::kernels();
  const QuantType act = cpu::activation_type(w.type);
  const cpu::VecDotFn dot = k.vec_dot[static_cast<uint32_t>(w.type)];
  const cpu::QuantizeRowFn quantize = k.quantize[static_cast<uint32_t>(act)];
  if (dot == nullptr || quantize == nullptr) {
    matmul_reference(w, matrix, x, n_tokens, y, pool);
    return;
  }
  const int64_t n_in = static_cast<int64_t>(w.ne[0]);
  const int64_t n_out = static_cast<int64_t>(w.ne[1]);
  MT_CHECK(w.present() && matrix < w.ne[2]);
  // Each input row is quantized once; each weight row is then read once for all tokens.
  const size_t act_bytes = cpu::activation_row_bytes(w.type, n_in);
  std::vector<uint8_t> packed(act_bytes * static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) quantize(x + t * n_in, &packed[static_cast<size_t>(t) * act_bytes], n_in);
  pool.parallel_for(n_out, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* row = w.row(static_cast<uint64_t>(r), matrix);
      for (int64_t t = 0; t < n_tokens; ++t) y[t * n_out + r] = dot(n_in, row, &packed[static_cast<size_t>(t) * act_bytes]);
    }
  });
}

}  // namespace mt
