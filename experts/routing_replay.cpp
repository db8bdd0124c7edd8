// Routing replay: a trace or the generator in the place of the router's top-k
// (routing_replay.h).
#include "experts/routing_replay.h"

#include <algorithm>

#include "core/check.h"

namespace mt {
namespace {

// "0-5" / "1, 3, 5-47": a sorted list of block indices, runs collapsed.
std::string block_list(const std::vector<uint32_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

Status check_trace(const RoutingTrace& t, const ReplayGeometry& g, const std::string& what) {
  if (t.events.empty()) return invalid_argument(what + ": the trace holds no routing");
  if (t.top_k != g.top_k) {
    return invalid_argument(what + ": the trace selects " + std::to_string(t.top_k) + " experts per token, the model " +
                            std::to_string(g.top_k));
  }
  if (t.n_expert > g.n_expert) {
    return invalid_argument(what + ": the trace names expert " + std::to_string(t.n_expert - 1) + ", the model has " +
                            std::to_string(g.n_expert) + " experts");
  }
  if (t.layers != g.moe_blocks) {
    return invalid_argument(what + ": the trace routes layers " + block_list(t.layers) + ", the model's MoE layers are " +
                            block_list(g.moe_blocks));
  }
  return {};
}

}  // namespace

StatusOr<std::unique_ptr<RoutingReplay>> RoutingReplay::create(std::string_view value, const ReplayGeometry& g) {
  MT_CHECK(!g.moe_blocks.empty() && g.top_k > 0 && g.top_k <= g.n_expert);
  auto source = parse_routing_source(value);
  if (!source.ok()) return invalid_argument("--routing " + source.status().message());
  std::unique_ptr<RoutingReplay> r(new RoutingReplay());
  r->geometry_ = g;
  r->index_of_block_.assign(g.moe_blocks.back() + 1, -1);
  for (size_t i = 0; i < g.moe_blocks.size(); ++i) r->index_of_block_[g.moe_blocks[i]] = static_cast<int32_t>(i);
  if (source->synthetic) {
    RoutingGenSpec spec = source->gen;
    RoutingGenParams& p = spec.params;
    if (spec.geometry_given && (p.n_expert != g.n_expert || p.top_k != g.top_k)) {
      return invalid_argument("--routing " + routing_gen_spec_string(spec) + ": " + std::to_string(p.n_expert) +
                              " experts top-" + std::to_string(p.top_k) + ", the model has " +
                              std::to_string(g.n_expert) + " experts top-" + std::to_string(g.top_k));
    }
    p.n_expert = g.n_expert;
    p.top_k = g.top_k;
    p.n_layers = static_cast<uint32_t>(g.moe_blocks.size());
    if (Status st = check_routing_gen_params(p); !st.ok()) return invalid_argument("--routing " + st.message());
    r->gen_ = std::make_unique<RoutingGenerator>(p);
    r->describe_ = routing_gen_spec_string(spec);
    return r;
  }
  const std::string what = "--routing trace:" + source->path;
  auto trace = read_routing_trace(source->path);
  if (!trace.ok()) return invalid_argument("--routing: " + trace.status().message());
  MT_RETURN_IF_ERROR(check_trace(*trace, g, what));
  r->trace_ = std::make_unique<RoutingTrace>(std::move(*trace));
  r->stream_ = std::make_unique<TraceStream>(*r->trace_);
  r->has_weights_ = std::all_of(r->trace_->events.begin(), r->trace_->events.end(),
                                [&](const RoutingEvent& e) { return e.weights.size() == g.top_k; });
  r->describe_ = "trace " + source->path + " (" + std::to_string(r->trace_->n_tokens) + " tokens" +
                 (r->has_weights_ ? ", with weights)" : ")");
  return r;
}

void RoutingReplay::rewind() {
  if (gen_ != nullptr) gen_ = std::make_unique<RoutingGenerator>(gen_->params());
  if (trace_ != nullptr) stream_ = std::make_unique<TraceStream>(*trace_);
}

void RoutingReplay::mark() {  // once per verification step: the copies reuse their storage
  if (gen_ != nullptr) {
    if (marked_gen_ == nullptr) marked_gen_ = std::make_unique<RoutingGenerator>(*gen_);
    else *marked_gen_ = *gen_;
  }
  if (stream_ != nullptr) {
    if (marked_stream_ == nullptr) marked_stream_ = std::make_unique<TraceStream>(*stream_);
    else *marked_stream_ = *stream_;
  }
}

void RoutingReplay::back_to_mark(uint32_t kept_rows) {
  MT_CHECK(marked_gen_ != nullptr || marked_stream_ != nullptr);
  if (marked_gen_ != nullptr) *gen_ = *marked_gen_;
  if (marked_stream_ != nullptr) *stream_ = *marked_stream_;
  std::vector<int32_t> ids(static_cast<size_t>(kept_rows) * geometry_.top_k);
  const uint64_t rows = rows_;
  for (uint32_t block : geometry_.moe_blocks) replace(block, kept_rows, ids.data(), nullptr);
  rows_ = rows;  // the kept rows were counted when they were evaluated
}

void RoutingReplay::replace(uint32_t block, uint32_t n_rows, int32_t* ids, float* weights) {
  MT_CHECK(block < index_of_block_.size() && index_of_block_[block] >= 0);
  const uint32_t K = geometry_.top_k;
  for (uint32_t t = 0; t < n_rows; ++t) {
    if (gen_) {
      const std::vector<int32_t>& e = gen_->next(static_cast<uint32_t>(index_of_block_[block]));
      std::copy(e.begin(), e.end(), ids + static_cast<size_t>(t) * K);
      continue;
    }
    const RoutingEvent* ev = stream_->next_event(block);
    if (ev == nullptr) {  // this block's events are used up: the trace starts over
      stream_->restart(block);
      ++wraps_;
      ev = stream_->next_event(block);
    }
    MT_CHECK(ev != nullptr && ev->experts.size() == K);
    std::copy(ev->experts.begin(), ev->experts.end(), ids + static_cast<size_t>(t) * K);
    if (has_weights_ && weights != nullptr) std::copy(ev->weights.begin(), ev->weights.end(), weights + static_cast<size_t>(t) * K);
  }
  rows_ += n_rows;
}

}  // namespace mt
