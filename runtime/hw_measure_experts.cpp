// CPU expert throughput (runtime/hw_measure.h): expert-shaped matrices of random valid
// blocks through matmul_jobs, as decode and prefill run an MoE layer's experts.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "core/malloc_ptr.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "model/linear.h"
#include "quant/blocks.h"
#include "quant/reference.h"
#include "runtime/hw_measure.h"

namespace mt {
namespace {

constexpr int64_t kEmbd = 2048, kFf = 768;  // a 30B-A3B-class expert
constexpr int64_t kPrefillTokens = 64;
constexpr int64_t kPoolRows = 32;           // distinct rows, copied over every matrix

using Bytes = MallocPtr<uint8_t>;

// A 3-D expert tensor (n_in, n_out, n_matrices) of copies of kPoolRows rows quantized from
// random normals, interleaved as the model would (cpu/repack.h) where the ISA has a kernel.
StatusOr<Tensor> make_weights(QuantType type, int64_t n_in, int64_t n_out, uint64_t n_matrices, ThreadPool& pool,
                              std::vector<Bytes>* storage) {
  const cpu::KernelTable& k = cpu::kernels();
  Tensor t;
  t.name = "hw_measure";
  t.type = type;
  t.ne = {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), n_matrices, 1};
  t.row_bytes = *row_bytes(type, static_cast<uint64_t>(n_in));
  t.matrix_bytes = t.row_bytes * static_cast<uint64_t>(n_out);
  t.interleaved = k.gemm_x8[static_cast<uint32_t>(type)] != nullptr && cpu::has_interleaved_layout(type) &&
                  n_out % cpu::kInterleave == 0 && n_in % kQKK == 0;
  const uint64_t bytes = (t.matrix_bytes * n_matrices + 4095) / 4096 * 4096;
  storage->emplace_back(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  uint8_t* dst = storage->back().get();
  if (dst == nullptr) return out_of_range("cannot allocate " + std::to_string(bytes >> 20) + " MiB of expert weights");

  std::mt19937 rng(static_cast<uint32_t>(n_in * 31 + n_out));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> f(static_cast<size_t>(n_in));
  std::vector<uint8_t> rows(t.row_bytes * kPoolRows), layout(rows.size());
  for (int64_t r = 0; r < kPoolRows; ++r) {
    for (float& x : f) x = normal(rng);
    quantize_row(type, f.data(), rows.data() + r * t.row_bytes, n_in);
  }
  if (t.interleaved) {
    for (int64_t g = 0; g < kPoolRows / cpu::kInterleave; ++g) {
      const size_t off = static_cast<size_t>(g) * cpu::kInterleave * t.row_bytes;
      cpu::interleave_rows(type, rows.data() + off, t.row_bytes, n_in, cpu::kInterleave, layout.data() + off);
    }
  } else {
    layout = rows;
  }
  // Groups of 8 rows (either layout keeps a group's bytes together), filled in parallel.
  const uint64_t group = cpu::kInterleave * t.row_bytes;
  const auto n_groups = static_cast<int64_t>(t.matrix_bytes * n_matrices / group);
  pool.parallel_for(n_groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(dst + g * group, layout.data() + (g % (kPoolRows / cpu::kInterleave)) * group, group);
    }
  });
  t.data = dst;
  return t;
}

struct ExpertSet {
  Tensor gate, up, down;  // (kEmbd, kFf, n) (kEmbd, kFf, n) (kFf, kEmbd, n)
  std::vector<Bytes> storage;
};

// Seconds of n_tok tokens through each of the first n_expert experts: gate and up of
// all experts as one job, then all downs (model/ffn's order and grouping).
double run_experts(const ExpertSet& s, uint64_t n_expert, int64_t n_tok, ThreadPool& pool) {
  const auto n = static_cast<int64_t>(n_expert);
  std::vector<float> x(static_cast<size_t>(n_tok * kEmbd));
  std::vector<float> g(static_cast<size_t>(n * n_tok * kFf)), u(g.size()), y(static_cast<size_t>(n * n_tok * kEmbd));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) / 8.f - 1.f;
  std::vector<MatJob> jobs;
  const auto t0 = std::chrono::steady_clock::now();
  PackSet xs(x.data(), n_tok, kEmbd, &pool);
  for (uint64_t e = 0; e < n_expert; ++e) {
    const auto off = static_cast<int64_t>(e) * n_tok * kFf;
    jobs.push_back({&s.gate, e, xs.get(s.gate.type), g.data() + off, kFf});
    jobs.push_back({&s.up, e, xs.get(s.up.type), u.data() + off, kFf});
  }
  matmul_jobs(jobs, pool);
  PackedRows h;
  h.pack(s.down.type, g.data(), n * n_tok, kFf, &pool);
  jobs.clear();
  for (uint64_t e = 0; e < n_expert; ++e) {
    const auto first = static_cast<int64_t>(e) * n_tok;
    jobs.push_back({&s.down, e, &h, y.data() + first * kEmbd, kEmbd, first, n_tok});
  }
  matmul_jobs(jobs, pool);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median seconds of `reps` passes after one warm-up.
double median_seconds(const ExpertSet& s, uint64_t n_expert, int64_t n_tok, int reps, ThreadPool& pool) {
  run_experts(s, n_expert, n_tok, pool);
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) v.push_back(run_experts(s, n_expert, n_tok, pool));
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

StatusOr<CpuExpertSpeed> measure_cpu_expert(QuantType type, const MeasureOptions& o, ThreadPool& pool) {
  const cpu::KernelTable& k = cpu::kernels();
  if (k.vec_dot[static_cast<uint32_t>(type)] == nullptr || !has_quantize(type)) {
    return unimplemented(std::string("no CPU kernel for ") + type_name(type));
  }
  if (o.reps < 1) return invalid_argument("reps must be >= 1");
  const uint64_t expert_bytes = 3 * *row_bytes(type, kEmbd) * kFf;
  const uint64_t n_expert = std::max<uint64_t>(1, (o.expert_bytes + expert_bytes - 1) / expert_bytes);
  ExpertSet s;
  MT_ASSIGN_OR_RETURN(s.gate, make_weights(type, kEmbd, kFf, n_expert, pool, &s.storage));
  MT_ASSIGN_OR_RETURN(s.up, make_weights(type, kEmbd, kFf, n_expert, pool, &s.storage));
  MT_ASSIGN_OR_RETURN(s.down, make_weights(type, kFf, kEmbd, n_expert, pool, &s.storage));

  CpuExpertSpeed speed;
  speed.type = type;
  const double decode_s = median_seconds(s, n_expert, 1, o.reps, pool);
  speed.decode_gbps = static_cast<double>(expert_bytes * n_expert) / decode_s / 1e9;
  const uint64_t n_prefill = std::clamp<uint64_t>(o.prefill_experts, 1, n_expert);
  const double prefill_s = median_seconds(s, n_prefill, kPrefillTokens, o.reps, pool);
  const double flops = 2.0 * 3 * kEmbd * kFf * kPrefillTokens * static_cast<double>(n_prefill);
  speed.prefill_gflops = flops / prefill_s / 1e9;
  return speed;
}

}  // namespace mt
