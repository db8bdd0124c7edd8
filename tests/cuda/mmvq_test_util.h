// Helpers of the MMVQ tests (mmvq_test.cpp, mmvq_layout_test.cpp): the weight types,
// random quantized matrices with their dequantized rows, their device copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/check.h"
#include "cuda/kernels/memory.h"
#include "model/weights.h"
#include "quant/reference.h"
#include "quant/types.h"

namespace mt::cuda::test {

inline const QuantType kTypes[] = {QuantType::F32,    QuantType::F16,   QuantType::BF16, QuantType::Q4_0,
                                   QuantType::Q4_1,   QuantType::Q5_0,  QuantType::Q5_1, QuantType::Q8_0,
                                   QuantType::IQ4_NL, QuantType::MXFP4, QuantType::Q2_K, QuantType::Q3_K,
                                   QuantType::Q4_K,   QuantType::Q5_K,  QuantType::Q6_K, QuantType::IQ4_XS};

inline bool is_float(QuantType t) { return t == QuantType::F32 || t == QuantType::F16 || t == QuantType::BF16; }

// n_mat matrices (n_out, n_in) of random weights in `type`, and their dequantized rows.
struct HostMatrix {
  QuantType type;
  int64_t n_in, n_out, n_mat;
  uint64_t row_bytes, matrix_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> rows;  // (n_mat * n_out, n_in)

  Tensor tensor() const {
    Tensor t;
    t.type = type;
    t.ne = {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_mat), 1};
    t.data = bytes.data();
    t.row_bytes = row_bytes;
    t.matrix_bytes = matrix_bytes;
    return t;
  }
  const uint8_t* row(int64_t mat, int64_t r) const {
    return bytes.data() + static_cast<uint64_t>(mat) * matrix_bytes + static_cast<uint64_t>(r) * row_bytes;
  }
};

inline HostMatrix make_matrix(QuantType type, int64_t n_in, int64_t n_out, int64_t n_mat, std::mt19937& rng) {
  HostMatrix m{type, n_in, n_out, n_mat, *row_bytes(type, static_cast<uint64_t>(n_in)), 0, {}, {}};
  m.matrix_bytes = m.row_bytes * static_cast<uint64_t>(n_out);
  m.bytes.resize(m.matrix_bytes * static_cast<uint64_t>(n_mat));
  m.rows.resize(static_cast<size_t>(n_mat * n_out * n_in));
  std::normal_distribution<float> g(0.f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_mat * n_out; ++r) {
    for (float& v : row) v = g(rng);
    uint8_t* dst = m.bytes.data() + static_cast<uint64_t>(r) * m.row_bytes;
    quantize_row(type, row.data(), dst, n_in);
    dequantize_row(type, dst, &m.rows[static_cast<size_t>(r * n_in)], n_in);
  }
  return m;
}

inline std::vector<float> random_rows(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(rows * n));
  for (float& x : v) x = g(rng);
  return v;
}

// The device copy of a host matrix, its base `offset` bytes into the allocation.
struct DeviceCopy {
  DeviceBuffer buf;
  DeviceMatrix w;
};
inline DeviceCopy upload(const HostMatrix& m, int64_t n_out, size_t offset) {
  DeviceCopy c{DeviceBuffer(m.bytes.size() + offset), {}};
  uint8_t* base = c.buf.as<uint8_t>() + offset;
  MT_CUDA_CHECK(cudaMemcpy(base, m.bytes.data(), m.bytes.size(), cudaMemcpyHostToDevice));
  c.w = {m.type, base, m.n_in, n_out, m.n_mat, m.row_bytes, m.matrix_bytes};
  return c;
}

}  // namespace mt::cuda::test
