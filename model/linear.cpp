#include "model/linear.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
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

void PackedRows::pack(QuantType weight_type, const float* x, int64_t n_tokens, int64_t n_in, ThreadPool* pool) {
  const cpu::KernelTable& k = cpu::kernels();
  const cpu::QuantizeRowFn quantize = k.quantize[static_cast<uint32_t>(cpu::activation_type(weight_type))];
  weight_type_ = weight_type;
  n_tokens_ = n_tokens;
  n_in_ = n_in;
  reference_ = k.vec_dot[static_cast<uint32_t>(weight_type)] == nullptr || quantize == nullptr;
  row_bytes_ = reference_ ? static_cast<size_t>(n_in) * sizeof(float) : cpu::activation_row_bytes(weight_type, n_in);
  data_.resize(row_bytes_ * static_cast<size_t>(n_tokens));
  auto rows = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* dst = data_.data() + static_cast<size_t>(t) * row_bytes_;
      if (reference_) {
        round_activation(weight_type, x + t * n_in, reinterpret_cast<float*>(dst), n_in);
      } else {
        quantize(x + t * n_in, dst, n_in);
      }
    }
  };
  if (pool != nullptr) {
    maybe_parallel_for(*pool, n_tokens, 8, rows);
  } else {
    rows(0, n_tokens);
  }
}

const PackedRows* PackSet::get(QuantType weight_type) {
  for (const auto& [type, rows] : packs_) {
    if (type == weight_type) return rows.get();
  }
  auto rows = std::make_unique<PackedRows>();
  rows->pack(weight_type, x_, n_tokens_, n_in_, pool_);
  packs_.emplace_back(weight_type, std::move(rows));
  return packs_.back().second.get();
}

namespace {

// Rows per (job, row block) unit: about 64 KiB of weights, a multiple of 8 (interleaved
// groups, tile kernels).
constexpr uint64_t kUnitBytes = 65536;
int64_t block_rows(const Tensor& w) {
  const uint64_t bytes = std::max<uint64_t>(1, w.row_bytes);
  return std::clamp<int64_t>(static_cast<int64_t>(kUnitBytes / bytes) / 8 * 8, 8, 2048);
}

int64_t job_tokens(const MatJob& j) { return j.n_tok >= 0 ? j.n_tok : j.x->n_tokens() - j.t0; }

void run_reference_rows(const MatJob& j, int64_t r0, int64_t r1) {
  const int64_t n_in = j.x->n_in();
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = r0; r < r1; ++r) {
    dequantize_row(j.w->type, j.w->row(static_cast<uint64_t>(r), j.matrix), row.data(), n_in);
    for (int64_t t = 0; t < job_tokens(j); ++t) {
      const float* xt = reinterpret_cast<const float*>(j.x->row(j.t0 + t));
      double acc = 0.0;
      for (int64_t i = 0; i < n_in; ++i) acc += static_cast<double>(row[i]) * xt[i];
      j.y[t * j.y_stride + r] = static_cast<float>(acc);
    }
  }
}

void run_rows(const MatJob& j, int64_t r0, int64_t r1) {
  if (j.x->reference()) {
    run_reference_rows(j, r0, r1);
    return;
  }
  const cpu::KernelTable& k = cpu::kernels();
  const uint32_t type = static_cast<uint32_t>(j.w->type);
  const uint8_t* w = j.w->row(static_cast<uint64_t>(r0), j.matrix);
  const auto stride = static_cast<size_t>(j.w->row_bytes);
  if (j.w->interleaved) {  // r0 is a multiple of 8; w is group r0 / 8's first byte
    MT_CHECK(r0 % cpu::kInterleave == 0 && (r1 - r0) % cpu::kInterleave == 0);
    k.gemm_x8[type](j.x->n_in(), w, cpu::kInterleave * stride, r1 - r0, j.x->row(j.t0), j.x->row_bytes(), job_tokens(j),
                    j.y + r0, j.y_stride);
  } else if (k.gemm[type] != nullptr && job_tokens(j) >= std::max<int64_t>(2, k.gemm_min_tokens[type])) {
    k.gemm[type](j.x->n_in(), w, stride, r1 - r0, j.x->row(j.t0), j.x->row_bytes(), job_tokens(j), j.y + r0, j.y_stride);
  } else {
    cpu::gemm_by_vec_dot(k.vec_dot[type], j.x->n_in(), w, stride, r1 - r0, j.x->row(j.t0), j.x->row_bytes(),
                         job_tokens(j), j.y + r0, j.y_stride);
  }
}

}  // namespace

void matmul_jobs(std::span<const MatJob> jobs, ThreadPool& pool) {
  // unit_end[i]: units of jobs 0..i; a unit is (job, block of block_rows rows).
  std::vector<int64_t> unit_end(jobs.size()), rows_per(jobs.size());
  int64_t units = 0, max_tokens = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatJob& j = jobs[i];
    MT_CHECK(j.w->present() && j.matrix < j.w->ne[2] && j.x->weight_type() == j.w->type);
    MT_CHECK(static_cast<uint64_t>(j.x->n_in()) == j.w->ne[0]);
    MT_CHECK(j.t0 >= 0 && j.t0 + job_tokens(j) <= j.x->n_tokens());
    max_tokens = std::max(max_tokens, job_tokens(j));
    if (job_tokens(j) == 0) {
      rows_per[i] = 1;
      unit_end[i] = units;
      continue;
    }
    rows_per[i] = block_rows(*j.w);
    units += (static_cast<int64_t>(j.w->ne[1]) + rows_per[i] - 1) / rows_per[i];
    unit_end[i] = units;
  }
  pool.parallel_for(
      units,
      [&](int64_t u0, int64_t u1) {
        size_t i = static_cast<size_t>(std::upper_bound(unit_end.begin(), unit_end.end(), u0) - unit_end.begin());
        for (int64_t u = u0; u < u1; ++u) {
          while (u >= unit_end[i]) ++i;
          const MatJob& j = jobs[i];
          const int64_t first = i == 0 ? 0 : unit_end[i - 1];
          const int64_t r0 = (u - first) * rows_per[i];
          const int64_t r1 = std::min<int64_t>(r0 + rows_per[i], static_cast<int64_t>(j.w->ne[1]));
          run_rows(j, r0, r1);
        }
      },
      // Decode: about four runs of consecutive units per thread (long streams of memory).
      // Prefill: single units (each is heavy; fine claiming balances uneven experts).
      max_tokens > 4 ? 1 : 0);
}

void matmul(const Tensor& w, uint64_t matrix, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  PackedRows packed;
  packed.pack(w.type, x, n_tokens, static_cast<int64_t>(w.ne[0]));
  const MatJob job{&w, matrix, &packed, y, static_cast<int64_t>(w.ne[1])};
  matmul_jobs({&job, 1}, pool);
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

}  // namespace mt
