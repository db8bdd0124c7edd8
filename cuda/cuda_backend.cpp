#include "cuda/cuda_backend.h"

#include <algorithm>
#include <string>

#include "cuda/cuda_model.h"
#include "cuda/decode_graph.h"
#include "cuda/kernels/env_switch.h"

namespace mt::cuda {
namespace {
// MOETIER_CUDA_ARGMAX=0: eval_argmax copies the logits rows to the host and scans them
// there (Backend's default) instead of reducing them on the device (an A/B switch).
EnvSwitch g_device_argmax("MOETIER_CUDA_ARGMAX", true);
}  // namespace

CudaBackend::CudaBackend(CudaModel& model) : model_(model), n_vocab_(model.host().hparams().n_vocab) {}
CudaBackend::~CudaBackend() = default;

const CudaBackend::Seq& CudaBackend::get(SeqId seq) const {
  auto it = seqs_.find(seq);
  MT_CHECK(it != seqs_.end());
  return it->second;
}

StatusOr<SeqId> CudaBackend::create_sequence(uint32_t n_ctx, QuantType kv_type) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Evaluator> s, model_.new_sequence(n_ctx, kv_type));
  const SeqId id = next_id_++;
  seqs_.emplace(id, Seq{std::move(s), kv_type});
  return id;
}

StatusOr<SeqId> CudaBackend::fork_sequence(SeqId from) {
  auto it = seqs_.find(from);
  if (it == seqs_.end()) return unknown_sequence(from);
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Evaluator> to, model_.new_sequence(it->second.e->n_ctx(), it->second.kv_type));
  MT_RETURN_IF_ERROR(model_.fork_sequence(*it->second.e, *to));
  const SeqId id = next_id_++;
  seqs_.emplace(id, Seq{std::move(to), it->second.kv_type});
  return id;
}

Status CudaBackend::keep_run_rollback(SeqId seq, uint32_t max_run) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  return model_.keep_run_rollback(*it->second.e, max_run);
}

Status CudaBackend::truncate_sequence(SeqId seq, uint32_t n_pos) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  return model_.truncate_sequence(*it->second.e, n_pos);
}

StatusOr<CudaBackend::Runs> CudaBackend::checked_runs(const Batch& batch) {
  Runs r;
  MT_ASSIGN_OR_RETURN(r.runs, split_runs(batch, n_vocab_));
  for (const SeqRun& run : r.runs) {
    auto it = seqs_.find(run.seq);
    if (it == seqs_.end()) return unknown_sequence(run.seq);
    MT_RETURN_IF_ERROR(check_run(run, it->second.e->position(), it->second.e->n_ctx()));
    r.seqs.push_back(it->second.e.get());
  }
  // One run asking for its last row or for every row: the sequence answers by itself.
  r.last = batch.n_logits() == 1 && batch.logits().back() != 0;
  r.one = r.runs.size() == 1 && (r.last || batch.n_logits() == batch.size());
  return r;
}

Status CudaBackend::eval(const Batch& batch, std::vector<float>* logits, Trace* trace) {
  MT_ASSIGN_OR_RETURN(Runs r, checked_runs(batch));
  if (r.one) return r.seqs[0]->feed(batch.tokens(), !r.last, logits, trace);  // it writes the caller's vector
  // Several sequences: one forward pass per micro-batch of their rows together.
  const std::span<const uint8_t> asked = batch.logits();
  std::vector<CudaModel::Feed> feeds(r.runs.size());
  for (size_t i = 0; i < r.runs.size(); ++i) {
    feeds[i].seq = r.seqs[i];
    feeds[i].tokens = batch.tokens().subspan(r.runs[i].first, r.runs[i].n);
    feeds[i].want = asked.subspan(r.runs[i].first, r.runs[i].n);
  }
  MT_RETURN_IF_ERROR(model_.eval_batch(feeds, logits, trace));
  MT_CHECK(logits->size() == static_cast<size_t>(batch.n_logits()) * n_vocab_);
  return {};
}

uint64_t CudaBackend::setups() const { return graph_captures_total(); }

Status CudaBackend::eval_argmax(const Batch& batch, std::vector<int32_t>* ids, Trace* trace) {
  if (!g_device_argmax.on()) return Backend::eval_argmax(batch, ids, trace);
  MT_ASSIGN_OR_RETURN(Runs r, checked_runs(batch));
  if (r.one) return r.seqs[0]->feed_argmax(batch.tokens(), !r.last, ids, trace);  // it reduces its rows
  return Backend::eval_argmax(batch, ids, trace);
}

}  // namespace mt::cuda
