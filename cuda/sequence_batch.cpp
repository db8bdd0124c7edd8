// CudaSequence::feed_batch: several sequences' tokens in passes of up to a micro-batch of
// rows (see sequence.h). Each pass holds consecutive pieces of the feeds in feed order (a
// feed longer than a pass's room goes on in the next pass), is enqueued by the first
// feed's sequence over the model's shared workspace, and advances every sequence it holds.
#include <algorithm>
#include <string>

#include "cuda/kernels/check.h"
#include "cuda/sequence.h"

namespace mt::cuda::detail {
namespace {

Status check_feed(const CudaModel::Impl& m, std::span<const SeqFeed> feeds, size_t i, uint32_t pos, uint32_t n_ctx) {
  const SeqFeed& f = feeds[i];
  const std::string which = "batch sequence " + std::to_string(i);
  if (f.seq == nullptr || !f.seq->belongs_to(m)) return invalid_argument(which + " is not a sequence of this CUDA model");
  for (size_t j = 0; j < i; ++j) {
    if (feeds[j].seq == f.seq) return invalid_argument(which + " is batch sequence " + std::to_string(j) + " again");
  }
  if (f.tokens.empty()) return invalid_argument(which + " has no tokens");
  if (!f.want.empty() && f.want.size() != f.tokens.size()) {
    return invalid_argument(which + ": " + std::to_string(f.want.size()) + " logits flags for " +
                            std::to_string(f.tokens.size()) + " tokens");
  }
  if (static_cast<uint64_t>(pos) + f.tokens.size() > n_ctx) {
    return out_of_range("context full: " + which + " at position " + std::to_string(pos) + " + " +
                        std::to_string(f.tokens.size()) + " tokens exceeds its context of " + std::to_string(n_ctx));
  }
  for (int32_t id : f.tokens) {
    if (id < 0 || static_cast<uint32_t>(id) >= m.hp.n_vocab) {
      return invalid_argument(which + ": token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(m.hp.n_vocab - 1) + ")");
    }
  }
  return {};
}

}  // namespace

Status CudaSequence::feed_batch(CudaModel::Impl& m, std::span<const SeqFeed> feeds, std::vector<float>* logits,
                                Trace* trace) {
  if (feeds.empty()) return invalid_argument("no sequences to evaluate");
  uint64_t total = 0, total_rows = 0;
  for (size_t i = 0; i < feeds.size(); ++i) {
    const CudaSequence* seq = feeds[i].seq;
    MT_RETURN_IF_ERROR(check_feed(m, feeds, i, seq ? seq->pos_ : 0, seq ? seq->n_ctx_ : 0));
    total += feeds[i].tokens.size();
    for (uint8_t w : feeds[i].want) total_rows += w != 0;
  }
  // Sized once, not cleared and regrown: a vector already this size (the next step of a
  // server) is not value-initialised again (19 MB of zeros per step at 32 rows of a
  // 151,936-token vocabulary); every row is overwritten by the copies below.
  const size_t V = m.hp.n_vocab;
  logits->resize(total_rows * V);
  size_t at = 0;  // the next pass's first logits row, in floats
  MT_CUDA_CHECK(cudaSetDevice(m.device));
  if (trace) trace->begin_step();
  CudaSequence& lead = *feeds[0].seq;
  const uint32_t micro = lead.micro_batch(static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX)));
  const auto pass_max = static_cast<uint32_t>(std::min<uint64_t>(total, micro));
  for (const SeqFeed& f : feeds) f.seq->ensure_workspace(pass_max);  // the longest context's attention scratch
  if (eval_batch_graph(m, feeds, logits, trace)) return {};
  std::vector<SeqRows> rows;       // the pass's sequences
  std::vector<int32_t> ids;        // (T) its tokens
  std::vector<uint32_t> out_rows;  // its rows whose logits are asked
  size_t fi = 0;
  uint32_t done = 0;  // tokens of feeds[fi] already evaluated
  while (fi < feeds.size()) {
    rows.clear(), ids.clear(), out_rows.clear();
    uint32_t T = 0;
    while (fi < feeds.size() && T < micro) {
      const SeqFeed& f = feeds[fi];
      const uint32_t n = std::min(micro - T, static_cast<uint32_t>(f.tokens.size()) - done);
      rows.push_back({f.seq, T, n, f.seq->pos_});
      for (uint32_t k = 0; k < n; ++k) {
        ids.push_back(f.tokens[done + k]);
        if (!f.want.empty() && f.want[done + k] != 0) out_rows.push_back(T + k);
      }
      T += n;
      done += n;
      if (done == f.tokens.size()) ++fi, done = 0;
    }
    Step step;
    step.host_ids = ids.data();
    step.T = T;
    step.rows = static_cast<uint32_t>(out_rows.size());
    step.host_logits = logits->data() + at;
    step.trace = trace;
    step.seqs = rows;
    step.out_rows = out_rows;
    lead.eval_pass(step);
    at += out_rows.size() * V;
    for (const SeqRows& r : rows) r.seq->pos_ += r.n;
  }
  MT_CHECK(at == logits->size());
  return {};
}

bool CudaSequence::eval_batch_graph(CudaModel::Impl& m, std::span<const SeqFeed> feeds, std::vector<float>* logits,
                                    Trace* trace, std::vector<int32_t>* ids) {
  const auto T = static_cast<uint32_t>(feeds.size());
  if (!BatchGraphs::wanted() || trace != nullptr || m.tiering != nullptr || T < 2 || T > BatchGraphs::kMaxTokens) {
    return false;
  }
  CudaSequence& lead = *feeds[0].seq;
  if (lead.timer_.on()) return false;  // the stage marks of plain launches
  // Attention layers only: the Gated DeltaNet and latent attention mixers take each
  // sequence's position from the host.
  for (const DevLayer& L : m.w.layers) {
    if (L.recurrent || L.mla) return false;
  }
  // A sequence may hold several rows (one sequence's verification of its guesses, fed as
  // one-token feeds in order): its k-th row is at its position + k, and the KV table's
  // per-row n_kv keeps the rows causal (each row's cache store comes before the attention).
  std::vector<uint32_t> row_pos(T);
  uint32_t max_pos = 0, max_ctx = 0;
  for (uint32_t i = 0; i < T; ++i) {
    const SeqFeed& f = feeds[i];
    if (f.tokens.size() != 1 || f.want.size() != 1 || f.want[0] == 0) return false;
    if (f.seq->kv_.type() != lead.kv_.type() || f.seq->kv_.row_bytes() != lead.kv_.row_bytes()) return false;
    uint32_t before = 0;
    for (uint32_t j = 0; j < i; ++j) before += feeds[j].seq == f.seq ? 1 : 0;
    row_pos[i] = f.seq->pos_ + before;
    if (row_pos[i] >= f.seq->n_ctx_) return false;
    max_pos = std::max(max_pos, row_pos[i]);
    max_ctx = std::max(max_ctx, f.seq->n_ctx_);
  }
  if (m.batch_graphs == nullptr) m.batch_graphs = std::make_unique<BatchGraphs>(m.hp.n_layer);
  BatchGraphs& g = *m.batch_graphs;
  if (!g.ok()) return false;
  // The rows as the pass holds them, and what the replay reads from pinned memory.
  std::vector<SeqRows> rows(T);
  for (uint32_t i = 0; i < T; ++i) {
    rows[i] = {feeds[i].seq, i, 1, row_pos[i]};
    g.ids()[i] = feeds[i].tokens[0];
  }
  fill_kv_rows(m, rows, T, g.kv_rows());
  const uint32_t cap = std::min(max_ctx, (max_pos / kGraphSpan + 1) * kGraphSpan);  // > every row's position
  Step step;
  step.host_ids = g.ids();
  step.T = T;
  step.rows = T;
  step.seqs = rows;
  step.pinned_kv_rows = g.kv_rows();
  step.batch_n_kv_cap = cap;
  const float* logits_dev = nullptr;
  step.logits_dev = &logits_dev;
  g.ensure(T, cap, lead.ws_.generation(), m.stream, [&] {
    lead.enqueue(step);
    return logits_dev;
  });
  if (ids != nullptr) {
    ids->resize(T);
    g.replay_argmax(T, ids->data(), m.hp.n_vocab, m.stream);
  } else {
    g.replay(T, logits->data(), m.hp.n_vocab, m.stream);
  }
  for (const SeqRows& r : rows) r.seq->pos_ += 1;  // k rows of one sequence: k positions
  return true;
}

void CudaSequence::eval_pass(const Step& step) {
  ensure_workspace(step.T);
  enqueue(step);
  MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  collect_device_times();
  timer_.step_done(step.T);
}

}  // namespace mt::cuda::detail
