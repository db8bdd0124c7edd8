// CudaBackend: the Backend (backend/backend.h) of a CudaModel. Each sequence is one
// CudaSequence (its device KV cache and decode graphs; the model's one workspace); eval()
// of several sequences runs them together (CudaModel::eval_batch: each pass's products and
// experts over every sequence's rows at once, attention per sequence) and returns the
// asked rows' logits in batch order. A batch of one run asking its last row (run, bench)
// or every row (logits) goes through the sequence's own feed (decode graphs).
// fork_sequence and truncate_sequence are the CUDA model's (cuda/cuda_model.h): the fork
// copies the KV rows (or recurrent states) on the device.
// Host-only header: callers never see CUDA types.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/evaluator.h"

namespace mt::cuda {

class CudaModel;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaModel& model);
  ~CudaBackend() override;

  uint32_t n_vocab() const override { return n_vocab_; }
  StatusOr<SeqId> create_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16) override;
  StatusOr<SeqId> fork_sequence(SeqId from) override;
  Status truncate_sequence(SeqId seq, uint32_t n_pos) override;
  Status keep_run_rollback(SeqId seq, uint32_t max_run) override;
  void free_sequence(SeqId seq) override { seqs_.erase(seq); }
  uint32_t position(SeqId seq) const override { return get(seq).e->position(); }
  uint32_t n_ctx(SeqId seq) const override { return get(seq).e->n_ctx(); }
  Status eval(const Batch& batch, std::vector<float>* logits, Trace* trace = nullptr) override;
  Status eval_argmax(const Batch& batch, std::vector<int32_t>* ids, Trace* trace = nullptr) override;
  uint64_t setups() const override;  // graph captures (cuda/decode_graph.h), the process's

 private:
  struct Seq {
    std::unique_ptr<Evaluator> e;  // a CudaSequence
    QuantType kv_type;
  };
  const Seq& get(SeqId seq) const;
  // A batch's runs checked against their sequences (eval and eval_argmax): one: a single
  // run asking for its last row (last) or for every row, which its sequence answers alone.
  struct Runs {
    std::vector<SeqRun> runs;
    std::vector<Evaluator*> seqs;
    bool last = false, one = false;
  };
  StatusOr<Runs> checked_runs(const Batch& batch);

  CudaModel& model_;
  uint32_t n_vocab_;
  std::unordered_map<SeqId, Seq> seqs_;
  SeqId next_id_ = 1;
};

}  // namespace mt::cuda
