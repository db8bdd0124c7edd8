#include "model/model.h"
#include "model/offload.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "core/log.h"
#include "core/meminfo.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/blocks.h"

#include "model/archs/blocks.h"
#include "model/linear.h"
#include "quant/reference.h"

namespace mt {
namespace {

std::vector<float> to_floats(const Tensor& t) {
  if (!t.present()) return {};
  std::vector<float> out(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
  dequantize_row(t.type, t.data, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// The matrices only matmul reads (so they may be stored interleaved).
std::vector<Tensor*> matmul_tensors(ModelWeights& w) {
  std::vector<Tensor*> out;
  for (LayerWeights& l : w.layers) {
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a, &l.wk_b, &l.wv_b, &l.gate_exps, &l.up_exps, &l.down_exps, &l.shexp_gate, &l.shexp_up,
                      &l.shexp_down, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ssm_qkv, &l.ssm_z, &l.ssm_ba, &l.ssm_beta,
                      &l.ssm_alpha, &l.ssm_out}) {
      out.push_back(t);
    }
  }
  if (w.output.data != w.token_embd.data) out.push_back(&w.output);  // tied: rows are read as embeddings
  return out;
}

// Storage for weights streamed every token: 2 MiB-aligned and marked for transparent huge
// pages, so the hardware prefetchers are not stopped at every 4 KiB page boundary and
// the TLB covers the stream.
uint8_t* allocate_huge(uint64_t bytes) {
  constexpr uint64_t kHuge = 2ull << 20;
  const uint64_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, size));
#if defined(MADV_HUGEPAGE)
  if (p != nullptr) madvise(p, size, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}

// The map's pages of a matrix that now lives in its interleaved copy: dropped from this
// process (the file stays mapped; they would be read again from the page cache on touch).
void release_mapped(const uint8_t* p, uint64_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
}

// A block's norms, biases and small vectors as floats.
LayerVectors layer_vectors(const LayerWeights& w) {
  LayerVectors v;
  v.attn_norm = to_floats(w.attn_norm);
  v.ffn_norm = to_floats(w.ffn_norm);
  v.q_norm = to_floats(w.q_norm);
  v.k_norm = to_floats(w.k_norm);
  v.bq = to_floats(w.bq);
  v.bk = to_floats(w.bk);
  v.bv = to_floats(w.bv);
  v.shexp_gate_inp = to_floats(w.shexp_gate_inp);
  v.exp_probs_b = to_floats(w.exp_probs_b);
  v.q_a_norm = to_floats(w.q_a_norm);
  v.kv_a_norm = to_floats(w.kv_a_norm);
  v.bo = to_floats(w.bo);
  v.sinks = to_floats(w.sinks);
  v.router_b = to_floats(w.router_b);
  v.ssm_conv1d = to_floats(w.ssm_conv1d);
  v.ssm_dt = to_floats(w.ssm_dt);
  v.ssm_a = to_floats(w.ssm_a);
  v.ssm_norm = to_floats(w.ssm_norm);
  return v;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  MT_ASSIGN_OR_RETURN(m->file_, gguf::GgufFile::open(path));
  MT_ASSIGN_OR_RETURN(m->hp_, read_hparams(m->file_));
  MT_ASSIGN_OR_RETURN(m->weights_, bind_weights(m->file_, m->hp_));
  for (const LayerWeights& w : m->weights_.layers) m->vectors_.push_back(layer_vectors(w));
  if (m->has_nextn()) {
    const NextnWeights& n = m->weights_.nextn.front();
    m->nextn_hp_ = m->hp_.for_layer(m->hp_.n_layer);
    m->nextn_hp_.n_layer = 1;
    m->nextn_hp_.recurrent.clear();
    m->nextn_vectors_ = layer_vectors(n.block);
    m->nextn_enorm_ = to_floats(n.enorm);
    m->nextn_hnorm_ = to_floats(n.hnorm);
    m->nextn_head_norm_ = to_floats(n.shared_head_norm.present() ? n.shared_head_norm : m->weights_.output_norm);
  }
  for (uint32_t l = 0; l < m->hp_.n_layer; ++l) m->layer_hp_.push_back(m->hp_.for_layer(l));
  m->output_norm_ = to_floats(m->weights_.output_norm);
  int threads = options.n_threads > 0 ? options.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, threads));
  if (options.interleave) {
    const cpu::KernelTable& k = cpu::kernels();
    std::vector<Tensor*> todo;
    uint64_t total = 0;
    for (Tensor* t : matmul_tensors(m->weights_)) {
      if (options.interleave_experts_only && t->name.find("_exps") == std::string::npos) continue;
      if (t->present() && k.gemm_x8[static_cast<uint32_t>(t->type)] != nullptr && cpu::has_interleaved_layout(t->type) &&
          t->ne[1] % cpu::kInterleave == 0 && t->ne[0] % kQKK == 0) {
        todo.push_back(t);
        total += t->matrix_bytes * t->ne[2];
      }
    }
    // The copies are anonymous memory: a model that only fits through the page cache (or
    // not at all) keeps its weights in the map.
    const uint64_t available = mem_available_bytes().value_or(~0ull);  // unknown: no limit
    if (total > 0 && total > available / 10 * 8) {
      log_info("not interleaving " + std::to_string(total >> 20) + " MiB of weights: only " + std::to_string(available >> 20) +
               " MiB of memory available (the weights stay memory-mapped)");
      todo.clear();
    }
    for (Tensor* t : todo) {
      const uint64_t bytes = t->matrix_bytes * t->ne[2];
      uint8_t* dst = allocate_huge(bytes);
      if (dst == nullptr) return out_of_range("cannot allocate " + std::to_string(bytes) + " bytes to interleave " + t->name);
      m->interleaved_.emplace_back(dst);
      const int64_t groups_per_matrix = static_cast<int64_t>(t->ne[1]) / cpu::kInterleave;
      const uint64_t group_bytes = cpu::kInterleave * t->row_bytes;
      m->pool_->parallel_for(groups_per_matrix * static_cast<int64_t>(t->ne[2]), [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          const uint64_t matrix = static_cast<uint64_t>(g / groups_per_matrix);
          const uint64_t offset = matrix * t->matrix_bytes + static_cast<uint64_t>(g % groups_per_matrix) * group_bytes;
          cpu::interleave_rows(t->type, t->data + offset, t->row_bytes, static_cast<int64_t>(t->ne[0]), cpu::kInterleave,
                               dst + offset);
        }
      });
      release_mapped(t->data, bytes);
      t->data = dst;
      t->interleaved = true;
    }
  }
  return m;
}

Status Model::eval(std::span<const int32_t> tokens, uint32_t pos0, KvCache& kv, bool all_logits,
                   std::vector<float>* logits, Trace* trace, MoeOffload* offload) const {
  const SeqBatch one{tokens, pos0, &kv, all_logits, true, {}};
  return eval_batch({&one, 1}, logits, trace, offload);
}

Status Model::eval_batch(std::span<const SeqBatch> seqs, std::vector<float>* logits, Trace* trace,
                         MoeOffload* offload) const {
  if (seqs.empty()) return invalid_argument("no sequences to evaluate");
  std::vector<SeqRows> rows;
  uint32_t T = 0;
  for (const SeqBatch& sb : seqs) {
    const auto n = static_cast<uint32_t>(sb.tokens.size());
    if (n == 0) return invalid_argument("no tokens to evaluate");
    MT_CHECK(sb.kv != nullptr && sb.kv->type() == seqs.front().kv->type());
    if (static_cast<uint64_t>(sb.pos0) + n > sb.kv->n_ctx()) {
      return out_of_range("context full: " + std::to_string(sb.pos0) + " + " + std::to_string(n) +
                          " tokens exceed the context of " + std::to_string(sb.kv->n_ctx()));
    }
    for (int32_t id : sb.tokens) {
      if (id < 0 || static_cast<uint32_t>(id) >= hp_.n_vocab) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                std::to_string(hp_.n_vocab - 1) + ")");
      }
    }
    if (sb.kv->has_recurrent() && sb.pos0 != 0 && sb.pos0 != sb.kv->recurrent_pos()) {
      return invalid_argument("this model's recurrent (Gated DeltaNet) state holds " + std::to_string(sb.kv->recurrent_pos()) +
                                 " positions and cannot go back or skip to position " + std::to_string(sb.pos0) +
                                 ": continue the sequence or start it again at 0");
    }
    rows.push_back({T, n, sb.pos0, sb.kv});
    T += n;
  }
  for (const SeqRows& r : rows) {
    if (r.kv->has_recurrent() && r.pos0 == 0) r.kv->reset_recurrent();
  }
  if (trace) trace->begin_step();
  if (offload) offload->scheduler->begin_step(T);
  const size_t E = hp_.n_embd;
  std::vector<float> x(T * E);  // (T, n_embd) every sequence's rows, in order
  for (const SeqRows& r : rows) {
    const SeqBatch& sb = seqs[static_cast<size_t>(&r - rows.data())];
    for (uint32_t i = 0; i < r.n; ++i) {
      dequantize_row(weights_.token_embd.type, weights_.token_embd.row(static_cast<uint64_t>(sb.tokens[i])),
                     &x[(r.row0 + i) * E], static_cast<int64_t>(E));
    }
  }
  const BlockFn block = block_fn(hp_.arch);
  for (uint32_t l = 0; l < hp_.n_layer; ++l) {
    // layer_hp_: per-layer heads and RoPE (laguna, gpt-oss)
    BlockArgs args{layer_hp_[l], weights_.layers[l], vectors_[l], l, x.data(), T, rows, *pool_, trace, offload};
    block(args);
    if (trace) for (uint32_t t = 0; t < T; ++t) trace->tensor("l_out", l, args.pos(t), {&x[t * E], E});
  }
  for (const SeqRows& r : rows) {
    if (r.kv->has_recurrent()) {
      r.kv->set_recurrent_pos(r.pos0 + r.n);
      r.kv->set_logged_run(r.pos0, r.kv->logs_run(r.n) ? r.n : 0);  // gated_delta_net_block logged it
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {  // the final hidden states asked for (NextN drafting)
    if (seqs[i].hidden == nullptr) continue;
    for (uint32_t k = 0; k < rows[i].n; ++k) {
      rms_norm(&x[(rows[i].row0 + k) * E], output_norm_, hp_.rms_eps, static_cast<int64_t>(E), &seqs[i].hidden[k * E]);
    }
  }
  std::vector<uint32_t> out_rows;  // rows whose logits are returned, in order
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].rows.empty()) {
      MT_CHECK(seqs[i].rows.size() == rows[i].n);
      for (uint32_t k = 0; k < rows[i].n; ++k) {
        if (seqs[i].rows[k] != 0) out_rows.push_back(rows[i].row0 + k);
      }
    } else if (seqs[i].all_logits) {
      for (uint32_t k = 0; k < rows[i].n; ++k) out_rows.push_back(rows[i].row0 + k);
    } else if (seqs[i].last_logits) {
      out_rows.push_back(rows[i].row0 + rows[i].n - 1);
    }
  }
  const auto R = static_cast<uint32_t>(out_rows.size());
  logits->resize(static_cast<size_t>(R) * hp_.n_vocab);
  if (R == 0) return {};
  std::vector<float> h(R * E);
  for (uint32_t r = 0; r < R; ++r) rms_norm(&x[out_rows[r] * E], output_norm_, hp_.rms_eps, E, &h[r * E]);
  matmul(weights_.output, 0, h.data(), R, logits->data(), *pool_);
  return {};
}

StatusOr<KvCache> Model::new_kv_cache(uint32_t n_ctx, QuantType type) const {
  if (n_ctx == 0) return invalid_argument("context size must be positive");
  const uint64_t block = type_traits(type).block_elems;
  if (block > 1 && hp_.head_dim % block != 0) {
    return invalid_argument(std::string("KV cache type ") + type_name(type) + " needs a head size that is a multiple of " +
                            std::to_string(block) + " (model has " + std::to_string(hp_.head_dim) + ")");
  }
  return KvCache::for_model(hp_, n_ctx, type);
}

StatusOr<Session> Session::create(const Model& model, uint32_t n_ctx, QuantType kv_type) {
  MT_ASSIGN_OR_RETURN(KvCache kv, model.new_kv_cache(n_ctx, kv_type));
  return Session(model, std::move(kv));
}

Status Session::feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) {
  MT_RETURN_IF_ERROR(model_->eval(tokens, pos_, kv_, all_logits, logits, trace, offload_));
  pos_ += static_cast<uint32_t>(tokens.size());
  return {};
}

}  // namespace mt
