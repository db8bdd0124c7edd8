#include "model/cpu_backend.h"

#include <algorithm>
#include <string>

#include "model/layers.h"

namespace mt {

const CpuBackend::Seq& CpuBackend::get(SeqId seq) const {
  auto it = seqs_.find(seq);
  MT_CHECK(it != seqs_.end());
  return *it->second;
}

SeqId CpuBackend::add(std::unique_ptr<Seq> seq) {
  const SeqId id = next_id_++;
  seqs_.emplace(id, std::move(seq));
  return id;
}

StatusOr<SeqId> CpuBackend::create_sequence(uint32_t n_ctx, QuantType kv_type) {
  MT_ASSIGN_OR_RETURN(KvCache kv, model_.new_kv_cache(n_ctx, kv_type));
  return add(std::make_unique<Seq>(Seq{std::move(kv), 0, std::nullopt}));
}

StatusOr<SeqId> CpuBackend::fork_sequence(SeqId from) {
  auto it = seqs_.find(from);
  if (it == seqs_.end()) return unknown_sequence(from);
  return add(std::make_unique<Seq>(*it->second));  // the cache's rows and recurrent states copied
}

Status CpuBackend::truncate_sequence(SeqId seq, uint32_t n_pos) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  Seq& s = *it->second;
  if (n_pos > s.pos) {
    return invalid_argument("sequence " + std::to_string(seq) + " holds " + std::to_string(s.pos) +
                            " positions: it cannot be truncated to " + std::to_string(n_pos));
  }
  if (s.kv.has_recurrent() && n_pos != 0 && n_pos != s.pos) {
    if (Status back = rollback_recurrent(model_.hparams(), s.kv, n_pos); !back.ok()) {
      return invalid_argument("sequence " + std::to_string(seq) + ": " + back.message() +
                              " (truncate to 0 to start over; keep_run_rollback lets a short run be cut)");
    }
  }
  if (s.nextn && n_pos < s.nextn->fed + 1) s.nextn->fed = n_pos > 0 ? n_pos - 1 : 0;  // entry p needs token p + 1
  s.pos = n_pos;  // rows past n_pos are rewritten by the next tokens; a recurrent state restarts at 0
  return {};
}

Status CpuBackend::keep_run_rollback(SeqId seq, uint32_t max_run) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  it->second->kv.set_log_runs(max_run);
  return {};
}

Status CpuBackend::enable_nextn(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  Seq& s = *it->second;
  if (s.nextn) return {};
  if (s.pos != 0) {
    return invalid_argument("NextN drafting must be enabled before a sequence's first token (sequence " +
                            std::to_string(seq) + " holds " + std::to_string(s.pos) + ")");
  }
  MT_ASSIGN_OR_RETURN(KvCache kv, model_.new_nextn_cache(s.kv.n_ctx(), s.kv.type()));
  s.nextn = Nextn{std::vector<float>(static_cast<size_t>(s.kv.n_ctx()) * model_.hparams().n_embd), std::move(kv), 0};
  return {};
}

Status CpuBackend::propose_nextn(SeqId seq, std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
  draft->clear();
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown_sequence(seq);
  Seq& s = *it->second;
  if (!s.nextn) return invalid_argument("sequence " + std::to_string(seq) + ": enable_nextn first");
  if (history.size() != static_cast<size_t>(s.pos) + 1) {
    return invalid_argument("NextN proposal: the history has " + std::to_string(history.size()) + " tokens, the sequence " +
                            std::to_string(s.pos) + " and one pending");
  }
  Nextn& n = *s.nextn;
  const size_t E = model_.hparams().n_embd, V = model_.hparams().n_vocab;
  // Entries fed .. pos - 1 pair each evaluated position with the token after it (the last
  // one with the pending token); the last one's output guesses the token after the pending.
  const uint32_t P = s.pos;
  if (P == 0 || max_n <= 0) return {};
  std::vector<float> logits(V), out(E);
  const uint32_t first = std::min(n.fed, P - 1);
  MT_RETURN_IF_ERROR(model_.eval_nextn(history.subspan(first + 1, P - first), &n.hidden[first * E], first, n.kv,
                                       logits.data(), out.data()));
  n.fed = P;  // entries up to P - 1 hold verified pairs (the pending token is the history's)
  // Guesses chained on the block's own output at positions P, P + 1, ...
  std::vector<float> h(E);
  for (int k = 0; k < max_n; ++k) {
    const auto guess = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    draft->push_back(guess);
    if (k + 1 == max_n || P + static_cast<uint32_t>(k) + 1 >= n.kv.n_ctx()) break;
    h = out;
    MT_RETURN_IF_ERROR(model_.eval_nextn({&draft->back(), 1}, h.data(), P + static_cast<uint32_t>(k), n.kv, logits.data(),
                                         out.data()));
  }
  return {};
}

Status CpuBackend::eval(const Batch& batch, std::vector<float>* logits, Trace* trace) {
  MT_ASSIGN_OR_RETURN(std::vector<SeqRun> runs, split_runs(batch, n_vocab()));
  step_.clear();
  for (const SeqRun& r : runs) {
    auto it = seqs_.find(r.seq);
    if (it == seqs_.end()) return unknown_sequence(r.seq);
    Seq& s = *it->second;
    MT_RETURN_IF_ERROR(check_run(r, s.pos, s.kv.n_ctx()));
    if (s.kv.type() != seqs_.at(runs.front().seq)->kv.type()) {
      return invalid_argument(std::string("sequences with KV caches of different types (") + type_name(s.kv.type()) + ", " +
                              type_name(seqs_.at(runs.front().seq)->kv.type()) + ") cannot share a batch");
    }
    Model::SeqBatch sb;
    sb.tokens = batch.tokens().subspan(r.first, r.n);
    sb.pos0 = r.pos0;
    sb.kv = &s.kv;
    sb.rows = batch.logits().subspan(r.first, r.n);
    if (s.nextn) sb.hidden = &s.nextn->hidden[static_cast<size_t>(r.pos0) * model_.hparams().n_embd];
    step_.push_back(sb);
  }
  MT_RETURN_IF_ERROR(model_.eval_batch(step_, logits, trace, offload_));
  for (const SeqRun& r : runs) seqs_.at(r.seq)->pos += r.n;
  return {};
}

}  // namespace mt
