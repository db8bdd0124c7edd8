// CpuBackend: the Backend (backend/backend.h) of a Model on the CPU. Each sequence is a
// KvCache and its length; eval() hands the whole batch to Model::eval_batch as one step (every
// projection and MoE layer over all rows at once; attention per sequence in its own cache),
// which writes the asked rows' logits straight into the caller's vector.
//
// Tiered experts: with a MoeOffload (model/offload.h; whoever builds the tiering sets it and
// keeps it alive) the MoE layers of later evals run through its scheduler and simulated
// device; null runs every expert on the CPU.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace mt {

struct MoeOffload;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Model& model, MoeOffload* offload = nullptr) : model_(model), offload_(offload) {}

  void set_offload(MoeOffload* offload) { offload_ = offload; }
  const Model& model() const { return model_; }

  uint32_t n_vocab() const override { return model_.hparams().n_vocab; }
  StatusOr<SeqId> create_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16) override;
  StatusOr<SeqId> fork_sequence(SeqId from) override;
  Status truncate_sequence(SeqId seq, uint32_t n_pos) override;
  Status keep_run_rollback(SeqId seq, uint32_t max_run) override;
  Status enable_nextn(SeqId seq) override;
  Status propose_nextn(SeqId seq, std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) override;
  void free_sequence(SeqId seq) override { seqs_.erase(seq); }
  uint32_t position(SeqId seq) const override { return get(seq).pos; }
  uint32_t n_ctx(SeqId seq) const override { return get(seq).kv.n_ctx(); }
  Status eval(const Batch& batch, std::vector<float>* logits, Trace* trace = nullptr) override;

 private:
  // A sequence's NextN drafting state: the trunk's hidden state per position, the NextN
  // block's cache and how many of its entries hold verified pairs (entry p: hidden p with
  // token p + 1); entries past that are a proposal's chain, rewritten by the next one.
  struct Nextn {
    std::vector<float> hidden;  // (n_ctx, n_embd)
    KvCache kv;
    uint32_t fed = 0;
  };
  struct Seq {
    KvCache kv;
    uint32_t pos = 0;
    std::optional<Nextn> nextn;
  };
  const Seq& get(SeqId seq) const;
  SeqId add(std::unique_ptr<Seq> seq);

  const Model& model_;
  MoeOffload* offload_;
  std::unordered_map<SeqId, std::unique_ptr<Seq>> seqs_;
  SeqId next_id_ = 1;
  std::vector<Model::SeqBatch> step_;  // eval's per-sequence view of the batch (reused)
};

}  // namespace mt
