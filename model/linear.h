// Linear layers over quantized weights.
//
// Activations are rounded the way llama.cpp's CPU backend rounds them before a dot
// product: each input row is quantized once to the type the weight pairs with
// (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants and
// IQ4_XS, F16 for F16, BF16 for BF16, none for F32); the cpu/ kernels then take integer
// (or F16/BF16) dot products per block, so the only difference from llama.cpp is float
// summation order. matmul_reference (dequantize, dot in double) is the reference the
// kernels are tested against.
//
// Several matrices that read activations already packed can run as one pool job
// (matmul_jobs): Q, K and V together; the gate and up matrices of every selected expert
// together; then all their down matrices. The jobs' rows are cut into row blocks (units)
// and the threads claim them, so a decode step with top-k = 2 still keeps every thread
// busy and pays one hand-off per phase rather than one per matrix. For decode a thread
// claims runs of consecutive units (about four runs per thread): it reads long stretches
// of memory in address order (single 64 KiB units measured ~5% slower decode). For
// prefill, units are heavy and claimed one at a time, which balances uneven experts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "model/weights.h"
#include "quant/types.h"

namespace mt {

// The activation type llama.cpp's CPU backend pairs with weights of `weight` (the one
// table lives in cpu/kernels.h).
QuantType activation_type(QuantType weight);

// out = x (n elements) rounded through activation_type(weight). In-place allowed.
void round_activation(QuantType weight, const float* x, float* out, int64_t n);

// n_tokens activation rows of n_in, packed once for weights of one type. Storage is
// reused across pack() calls.
class PackedRows {
 public:
  // Rows are quantized over `pool` when there are several (null: on this thread).
  void pack(QuantType weight_type, const float* x, int64_t n_tokens, int64_t n_in, ThreadPool* pool = nullptr);
  QuantType weight_type() const { return weight_type_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_in() const { return n_in_; }
  size_t row_bytes() const { return row_bytes_; }
  const uint8_t* row(int64_t t) const { return data_.data() + static_cast<size_t>(t) * row_bytes_; }
  // True when the weight type has no cpu/ kernel: rows hold rounded floats and the dot
  // goes through the reference path.
  bool reference() const { return reference_; }

 private:
  QuantType weight_type_ = QuantType::F32;
  int64_t n_tokens_ = 0, n_in_ = 0;
  size_t row_bytes_ = 0;
  bool reference_ = false;
  std::vector<uint8_t> data_;
};

// y[t * y_stride + r] = (matrix `matrix` of w) row r . x row (t0 + t), for every row r of
// the matrix (w: ne0 = n_in, ne1 = n_out) and t < n_tok (-1: all rows of x from t0).
struct MatJob {
  const Tensor* w;
  uint64_t matrix;
  const PackedRows* x;
  float* y;
  int64_t y_stride;
  int64_t t0 = 0;
  int64_t n_tok = -1;
};

// The packs of one activation matrix for each weight type that reads it (Q, K and V, or
// gate and up, may differ in type).
class PackSet {
 public:
  PackSet(const float* x, int64_t n_tokens, int64_t n_in, ThreadPool* pool = nullptr)
      : x_(x), n_tokens_(n_tokens), n_in_(n_in), pool_(pool) {}
  const PackedRows* get(QuantType weight_type);

 private:
  const float* x_;
  int64_t n_tokens_, n_in_;
  ThreadPool* pool_;
  std::vector<std::pair<QuantType, std::unique_ptr<PackedRows>>> packs_;
};
// Every job's rows, split over the pool as (job, row block) units, in one hand-off.
void matmul_jobs(std::span<const MatJob> jobs, ThreadPool& pool);

// Y (n_tokens x n_out) = X (n_tokens x n_in, f32) times matrix `matrix` of w: one job.
// Results do not depend on n_tokens or the thread count.
void matmul(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The reference of matmul: weight rows dequantized once per call, dot products in double.
void matmul_reference(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y,
                      ThreadPool& pool);

}  // namespace mt
