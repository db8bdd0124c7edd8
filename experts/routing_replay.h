// Routing replay (issue 28): a routing stream (routing_gen.h: a recorded trace or the
// generator) put in the place of a model's router decisions, so that the real engine
// (every kernel, copy, CPU expert and cache decision) computes the experts the stream names
// and the speed measured is that of the stream's routing. The router still runs (its cost
// stays real); after its top-k, the selected ids are overwritten. The text generated is
// then meaningless.
//
// Order: per MoE block, the stream is consumed one row at a time in the order the rows are
// evaluated: a forward call's rows in batch order (a prompt's tokens, then each decoded
// token; in a batch of several sequences each sequence's run where the batch holds it, so
// the semantics are per step, not per sequence). A block's rows of successive calls
// continue where the last left off, so a prompt split into micro-batches (CUDA) takes the
// same entries as one batch, and a replayed record is reproduced id for id.
//
// Weights: a trace's recorded weights when every event has them (a record of the same
// model and tokens then replays to the same logits); otherwise the router's own top-k
// weights stay, by rank: rank i's weight goes to the stream's i-th expert. So the combine
// weighs K experts with the profile the architecture gives (renormalised, scaled), and no
// device has to read the router's scores back to weigh ids it did not choose.
//
// Geometry: a synth spec runs on the model's experts and top-k (a preset, experts= or
// top-k= that differ is an error); generator layer i is the model's i-th MoE block. A trace
// must route exactly the model's MoE blocks with the model's top-k and ids below its
// experts. When a block's events run out, the trace starts over (wraps() counts it).
// Not thread-safe: one evaluation at a time calls replace().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "experts/routing_gen.h"
#include "experts/routing_trace.h"

namespace mt {

struct ReplayGeometry {
  std::vector<uint32_t> moe_blocks;  // ascending block indices of the MoE layers
  uint32_t n_expert = 0, top_k = 0;
};

class RoutingReplay {
 public:
  // value: "synth:KEY=VALUE,..." or "trace:FILE" (parse_routing_source). Errors (one line,
  // opening with "--routing"): the spec's, the file's, a geometry the model does not have.
  static StatusOr<std::unique_ptr<RoutingReplay>> create(std::string_view value, const ReplayGeometry& geometry);

  // Rows [0, n_rows) of a MoE block: ids (n_rows, top_k) take the stream's next entries;
  // weights (n_rows, top_k) the trace's where has_weights() (may be null otherwise, and is
  // left alone). block must be one of the geometry's MoE blocks (MT_CHECK).
  void replace(uint32_t block, uint32_t n_rows, int32_t* ids, float* weights);

  bool has_weights() const { return has_weights_; }
  uint32_t top_k() const { return geometry_.top_k; }
  // "synth:preset=qwen3-30b,experts=128,..." or "trace FILE (N tokens)".
  const std::string& describe() const { return describe_; }
  uint64_t rows_replaced() const { return rows_; }  // over every block
  uint64_t tokens_per_block() const { return rows_ / geometry_.moe_blocks.size(); }
  uint64_t wraps() const { return wraps_; }         // a trace's blocks starting over
  // The stream from its first entry again (a generator from its seed, a trace from its
  // first event), so that a run repeated after it sees the same routing; the counts above
  // keep counting.
  void rewind();
  // Speculative verification: mark() before a step's rows, back_to_mark(kept) after it,
  // so that only the rows kept in the sequence (the pending token and the accepted
  // guesses) have taken entries and a position gets the same routing however often it is
  // evaluated (the rejected guesses' positions are evaluated again in the next step).
  void mark();
  void back_to_mark(uint32_t kept_rows);

 private:
  RoutingReplay() = default;

  ReplayGeometry geometry_;
  std::vector<int32_t> index_of_block_;  // [block] -> MoE index; -1: not a MoE block
  std::unique_ptr<RoutingGenerator> gen_;
  std::unique_ptr<RoutingTrace> trace_;
  std::unique_ptr<TraceStream> stream_;  // over *trace_
  std::unique_ptr<RoutingGenerator> marked_gen_;  // mark()'s copies
  std::unique_ptr<TraceStream> marked_stream_;
  bool has_weights_ = false;
  std::string describe_;
  uint64_t rows_ = 0, wraps_ = 0;
};

}  // namespace mt
