// Backend: where a model's forward pass runs, as its callers (run, logits, bench, the
// server's scheduler) see it: one call evaluates a batch of tokens of many sequences and
// returns the logits of the rows asked for. Sequences, each with its own KV cache, are
// created, forked, truncated and freed through it. The CPU model (model/cpu_backend.h) and
// the CUDA model (cuda/cuda_backend.h) implement it; callers never see which.
//
// A batch is a list of tokens, each with its sequence, its position and whether its logits
// are wanted. Its rules: a sequence's tokens form one contiguous run of the batch, at
// consecutive positions starting at the sequence's length (position()); runs of different
// sequences may follow each other in any order, so one sequence's prompt chunk and other
// sequences' single decode tokens share a call. The asked rows' logits come back in batch
// order, n_vocab floats each. Bad input (an unknown sequence, a position out of order, a
// token outside the vocabulary, a full context, an empty batch) is a Status and leaves
// every sequence as it was; never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "quant/types.h"

namespace mt {

class Trace;  // model/layers.h: receives intermediates and routing decisions

using SeqId = uint32_t;

// Which rows of a run of tokens return logits.
enum class Logits { kNone, kLast, kAll };

// The tokens of one evaluation, struct of arrays (n entries each).
class Batch {
 public:
  // One token of seq at pos; logits: return this row's logits.
  void add(SeqId seq, uint32_t pos, int32_t token, bool logits);
  // tokens of seq at pos0, pos0 + 1, ...; which of them return logits.
  void add(SeqId seq, uint32_t pos0, std::span<const int32_t> tokens, Logits which);
  void clear();  // keeps the capacity (a batch reused every step allocates once)

  size_t size() const { return token_.size(); }
  bool empty() const { return token_.empty(); }
  std::span<const int32_t> tokens() const { return token_; }
  std::span<const SeqId> seqs() const { return seq_; }
  std::span<const uint32_t> positions() const { return pos_; }
  std::span<const uint8_t> logits() const { return logits_; }  // 1: the row's logits are returned
  uint32_t n_logits() const { return n_logits_; }

 private:
  std::vector<int32_t> token_;
  std::vector<SeqId> seq_;
  std::vector<uint32_t> pos_;
  std::vector<uint8_t> logits_;
  uint32_t n_logits_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual uint32_t n_vocab() const = 0;
  // A new empty sequence with room for n_ctx positions in a KV cache of kv_type. Errors:
  // n_ctx 0, a cache type the device or the model's head size cannot hold, no memory.
  virtual StatusOr<SeqId> create_sequence(uint32_t n_ctx, QuantType kv_type = QuantType::F16) = 0;
  // A new sequence holding a copy of from's cache: same positions, context and cache type;
  // the two continue independently.
  virtual StatusOr<SeqId> fork_sequence(SeqId from) = 0;
  // Keeps positions [0, n_pos): the sequence's next token goes at n_pos (<= position()).
  // A recurrent (Gated DeltaNet) state cannot go back: such a sequence accepts only 0 (start
  // over), its own length, or (keep_run_rollback) a position inside its last run.
  virtual Status truncate_sequence(SeqId seq, uint32_t n_pos) = 0;
  // Lets truncate_sequence go back into this sequence's last run when that run had 2 to
  // max_run tokens (speculative verification), also on a recurrent model: there each such
  // run keeps its recurrent states from before it and its inputs to them (a fixed-size copy
  // per run, no cache rows). 0 turns it off. Backends whose sequences always truncate (no
  // recurrent state) need nothing: the default does nothing.
  virtual Status keep_run_rollback(SeqId seq, uint32_t max_run) {
    (void)seq, (void)max_run;
    return {};
  }
  // NextN (MTP) drafting, for a model whose file carries a NextN block: enable_nextn on a
  // sequence still at position 0 keeps its final hidden states from then on; propose_nextn
  // guesses up to max_n tokens to follow `history` (the sequence's tokens, then the pending
  // one not yet evaluated) with the NextN block, each further guess chained on the block's
  // own output. Backends or models without it say so (the default).
  virtual Status enable_nextn(SeqId seq) {
    (void)seq;
    return unimplemented("NextN (MTP) drafting is not available on this device");
  }
  virtual Status propose_nextn(SeqId seq, std::span<const int32_t> history, int max_n, std::vector<int32_t>* draft) {
    (void)seq, (void)history, (void)max_n, (void)draft;
    return unimplemented("NextN (MTP) drafting is not available on this device");
  }
  virtual void free_sequence(SeqId seq) = 0;  // an unknown id is ignored
  // A live sequence's length (its next position) and context; an unknown id is a broken
  // invariant (MT_CHECK).
  virtual uint32_t position(SeqId seq) const = 0;
  virtual uint32_t n_ctx(SeqId seq) const = 0;

  // Evaluates every token of the batch (the rules above) and sets *logits to the asked
  // rows' logits, in batch order: batch.n_logits() x n_vocab(). The sequences advance by
  // their runs' lengths. trace, when given, sees each forward call's intermediates.
  virtual Status eval(const Batch& batch, std::vector<float>* logits, Trace* trace = nullptr) = 0;
  // The same evaluation, returning only each asked row's row_argmax (core/row_argmax.h:
  // greedy decoding's pick without bias or penalties) into *ids, in batch order. The
  // default evaluates the logits and scans them on the host; the CUDA backend reduces a
  // verification's rows on the device, so only their ids cross to the host (speculative
  // decoding's greedy steps). DataLoss where a row's logits are -inf or NaN throughout.
  virtual Status eval_argmax(const Batch& batch, std::vector<int32_t>* ids, Trace* trace = nullptr);
  // One-time set-ups so far (a device's graph captures): a step during which this grew
  // measured the set-up, not the step (the draft policy does not take its time as a cost).
  virtual uint64_t setups() const { return 0; }

 protected:
  std::vector<float> argmax_scratch_;  // eval_argmax's logits (the default)
};

// One sequence's run of a batch: entries [first, first + n), at positions pos0 .. pos0 + n - 1.
struct SeqRun {
  SeqId seq = 0;
  uint32_t first = 0, n = 0, pos0 = 0;
};

// The runs of a batch, in batch order, after the checks that need no sequence state: not
// empty, token ids below n_vocab, each sequence in one run at consecutive positions.
StatusOr<std::vector<SeqRun>> split_runs(const Batch& batch, uint32_t n_vocab);
// A run against its sequence: it starts at the sequence's length and fits its context.
Status check_run(const SeqRun& run, uint32_t length, uint32_t n_ctx);
Status unknown_sequence(SeqId seq);

// Owns one sequence of a backend (freed with it) and evaluates runs of its tokens: the
// shape of a single-sequence caller (run, logits, bench).
class Sequence {
 public:
  static StatusOr<Sequence> create(Backend& backend, uint32_t n_ctx, QuantType kv_type = QuantType::F16);
  Sequence(Sequence&& o) noexcept;
  Sequence& operator=(Sequence&& o) noexcept;
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;
  ~Sequence();

  SeqId id() const { return id_; }
  uint32_t position() const { return backend_->position(id_); }
  // Appends tokens at position(): logits of the last token, or of every token (n x n_vocab)
  // when all_logits.
  Status feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace = nullptr);
  // The same through Backend::eval_argmax: the last row's (all_logits: every row's) argmax.
  Status feed_argmax(std::span<const int32_t> tokens, bool all_logits, std::vector<int32_t>* ids,
                     Trace* trace = nullptr);

 private:
  Sequence(Backend* backend, SeqId id) : backend_(backend), id_(id) {}
  Backend* backend_ = nullptr;
  SeqId id_ = 0;
  Batch batch_;
};

}  // namespace mt
