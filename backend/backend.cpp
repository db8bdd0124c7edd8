#include "backend/backend.h"

#include <string>
#include <unordered_set>
#include <utility>

#include "core/row_argmax.h"

namespace mt {

void Batch::add(SeqId seq, uint32_t pos, int32_t token, bool logits) {
  token_.push_back(token);
  seq_.push_back(seq);
  pos_.push_back(pos);
  logits_.push_back(logits ? 1 : 0);
  n_logits_ += logits ? 1 : 0;
}

void Batch::add(SeqId seq, uint32_t pos0, std::span<const int32_t> tokens, Logits which) {
  const auto n = static_cast<uint32_t>(tokens.size());
  for (uint32_t i = 0; i < n; ++i) add(seq, pos0 + i, tokens[i], which == Logits::kAll || (which == Logits::kLast && i + 1 == n));
}

void Batch::clear() {
  token_.clear();
  seq_.clear();
  pos_.clear();
  logits_.clear();
  n_logits_ = 0;
}

Status unknown_sequence(SeqId seq) { return invalid_argument("sequence " + std::to_string(seq) + " does not exist"); }

StatusOr<std::vector<SeqRun>> split_runs(const Batch& batch, uint32_t n_vocab) {
  if (batch.empty()) return invalid_argument("the batch has no tokens");
  const std::span<const int32_t> tokens = batch.tokens();
  const std::span<const SeqId> seqs = batch.seqs();
  const std::span<const uint32_t> pos = batch.positions();
  std::vector<SeqRun> runs;
  std::unordered_set<SeqId> seen;
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." +
                              std::to_string(n_vocab - 1) + ")");
    }
    if (!runs.empty() && runs.back().seq == seqs[i]) {
      SeqRun& r = runs.back();
      if (pos[i] != r.pos0 + r.n) {
        return invalid_argument("sequence " + std::to_string(seqs[i]) + ": position " + std::to_string(pos[i]) +
                                " follows position " + std::to_string(r.pos0 + r.n - 1) + " (a run's positions are consecutive)");
      }
      ++r.n;
      continue;
    }
    if (!seen.insert(seqs[i]).second) {
      return invalid_argument("sequence " + std::to_string(seqs[i]) +
                              " has two runs in the batch (a sequence's tokens must be contiguous)");
    }
    runs.push_back({seqs[i], i, 1, pos[i]});
  }
  return runs;
}

Status check_run(const SeqRun& run, uint32_t length, uint32_t n_ctx) {
  if (run.pos0 != length) {
    return invalid_argument("sequence " + std::to_string(run.seq) + " holds " + std::to_string(length) +
                            " positions: its tokens must start at position " + std::to_string(length) + ", not " +
                            std::to_string(run.pos0) + " (truncate it first to go back)");
  }
  if (static_cast<uint64_t>(run.pos0) + run.n > n_ctx) {
    return out_of_range("context full: sequence " + std::to_string(run.seq) + " at position " + std::to_string(run.pos0) +
                        " + " + std::to_string(run.n) + " tokens exceeds its context of " + std::to_string(n_ctx));
  }
  return {};
}

StatusOr<Sequence> Sequence::create(Backend& backend, uint32_t n_ctx, QuantType kv_type) {
  MT_ASSIGN_OR_RETURN(SeqId id, backend.create_sequence(n_ctx, kv_type));
  return Sequence(&backend, id);
}

Sequence::Sequence(Sequence&& o) noexcept
    : backend_(std::exchange(o.backend_, nullptr)), id_(o.id_), batch_(std::move(o.batch_)) {}

Sequence& Sequence::operator=(Sequence&& o) noexcept {
  if (this != &o) {
    if (backend_ != nullptr) backend_->free_sequence(id_);
    backend_ = std::exchange(o.backend_, nullptr);
    id_ = o.id_;
    batch_ = std::move(o.batch_);
  }
  return *this;
}

Sequence::~Sequence() {
  if (backend_ != nullptr) backend_->free_sequence(id_);
}

Status Sequence::feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) {
  MT_CHECK(backend_ != nullptr);
  batch_.clear();
  batch_.add(id_, backend_->position(id_), tokens, all_logits ? Logits::kAll : Logits::kLast);
  return backend_->eval(batch_, logits, trace);
}

Status Sequence::feed_argmax(std::span<const int32_t> tokens, bool all_logits, std::vector<int32_t>* ids,
                             Trace* trace) {
  MT_CHECK(backend_ != nullptr);
  batch_.clear();
  batch_.add(id_, backend_->position(id_), tokens, all_logits ? Logits::kAll : Logits::kLast);
  return backend_->eval_argmax(batch_, ids, trace);
}

Status Backend::eval_argmax(const Batch& batch, std::vector<int32_t>* ids, Trace* trace) {
  MT_RETURN_IF_ERROR(eval(batch, &argmax_scratch_, trace));
  return argmax_rows(argmax_scratch_, batch.n_logits(), ids);
}

}  // namespace mt
