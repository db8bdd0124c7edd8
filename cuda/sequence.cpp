// CudaSequence: the feed loop, the workspace's growth, a decode step through the decode
// graph, fork and truncate (see sequence.h).
#include "cuda/sequence.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>

#include "core/row_argmax.h"
#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

SequenceOptions SequenceOptions::from_env() {
  SequenceOptions o;
  const char* env = std::getenv("MOETIER_CUDA_GRAPHS");
  o.graphs = env == nullptr || std::string(env) != "0";
  if (const char* wm = std::getenv("MOETIER_CUDA_ATTN_WARP_MAX"); wm != nullptr) {
    o.warp_attention_max = static_cast<uint32_t>(std::max(0, std::atoi(wm)));
  }
  if (const char* ub = std::getenv("MOETIER_CUDA_UBATCH"); ub != nullptr && std::atoi(ub) > 0) {
    o.micro_batch = static_cast<uint32_t>(std::atoi(ub));
  }
  return o;
}

// Decode tokens replay one instantiated CUDA graph per span of kGraphSpan positions (the
// position is read on the device), except in a tiered model, whose hybrid step waits for
// its routing on the host.
CudaSequence::CudaSequence(CudaModel::Impl& m, uint32_t n_ctx, QuantType kv_type)
    : m_(m),
      n_ctx_(n_ctx),
      opt_(SequenceOptions::from_env()),
      kv_(m.hp, n_ctx, kv_type),
      ws_(m.ws),
      graph_(opt_.graphs && m.tiering == nullptr, m.hp.n_vocab) {
  // MLA: the per-head ids of the largest micro-batch, once (a captured graph reads them).
  if (m.hp.mla) {
    kv_.build_head_ids(m.hp.n_head, std::max({opt_.micro_batch, CudaModel::kStreamMicroBatch,
                                              static_cast<uint32_t>(kMmvqMaxTokens)}));
  }
}

CudaSequence::~CudaSequence() = default;

Status CudaSequence::check_tokens(std::span<const int32_t> tokens) const {
  const HParams& hp = m_.hp;
  const auto T = static_cast<uint32_t>(tokens.size());
  if (T == 0) return invalid_argument("no tokens to evaluate");
  if (static_cast<uint64_t>(pos_) + T > n_ctx_) {
    return out_of_range("context full: " + std::to_string(pos_) + " + " + std::to_string(T) +
                        " tokens exceed the context of " + std::to_string(n_ctx_));
  }
  for (int32_t id : tokens) {
    if (id < 0 || static_cast<uint32_t>(id) >= hp.n_vocab) {
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(hp.n_vocab - 1) + ")");
    }
  }
  return {};
}

Status CudaSequence::feed_argmax(std::span<const int32_t> tokens, bool all_logits, std::vector<int32_t>* ids,
                                 Trace* trace) {
  const auto T = static_cast<uint32_t>(tokens.size());
  const bool rows = all_logits && T >= 2 && T <= BatchGraphs::kMaxTokens;  // a verification's rows
  if ((rows || T == 1) && trace == nullptr) {
    MT_RETURN_IF_ERROR(check_tokens(tokens));
    MT_CUDA_CHECK(cudaSetDevice(m_.device));
    bool done = false;
    if (rows) {
      done = eval_rows_graph(tokens, nullptr, ids);
    } else if (graph_.on()) {  // one decode token: the decode graph's pick
      done = eval_token_graph(tokens[0], nullptr, ids);
      if (done) pos_ += 1;
    }
    if (done) {
      for (size_t r = 0; r < ids->size(); ++r) {
        if ((*ids)[r] < 0) return no_token_left(r);
      }
      return {};
    }
  }
  return Evaluator::feed_argmax(tokens, all_logits, ids, trace);
}

Status CudaSequence::feed(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits, Trace* trace) {
  const auto T = static_cast<uint32_t>(tokens.size());
  MT_RETURN_IF_ERROR(check_tokens(tokens));
  if (trace) trace->begin_step();
  MT_CUDA_CHECK(cudaSetDevice(m_.device));
  logits->clear();
  // A few tokens with every row's logits (a verification of guesses): the batch graph's
  // rows, one per token, at consecutive positions of this sequence.
  if (all_logits && T >= 2 && T <= BatchGraphs::kMaxTokens && trace == nullptr && eval_rows_graph(tokens, logits)) {
    return {};
  }
  const uint32_t micro = micro_batch(T);
  for (uint32_t c0 = 0; c0 < T; c0 += micro) {
    const uint32_t n = std::min(micro, T - c0);
    const bool last = c0 + n == T;
    const uint32_t rows = all_logits ? n : (last ? 1 : 0);
    // One decode token (untraced): a graph replay.
    const bool one = n == 1 && rows == 1;
    const bool done = one && trace == nullptr &&
                      eval_token_graph(tokens[c0], logits);
    if (!done) {
      eval_chunk(tokens.subspan(c0, n), rows, logits, trace);
    }
    pos_ += n;
  }
  return {};
}

bool CudaSequence::eval_rows_graph(std::span<const int32_t> tokens, std::vector<float>* logits,
                                   std::vector<int32_t>* ids) {
  static constexpr uint8_t kWant = 1;
  std::array<SeqFeed, BatchGraphs::kMaxTokens> feeds;
  for (size_t i = 0; i < tokens.size(); ++i) feeds[i] = {this, tokens.subspan(i, 1), {&kWant, 1}};
  ensure_workspace(static_cast<uint32_t>(tokens.size()));
  if (logits != nullptr) logits->resize(tokens.size() * m_.hp.n_vocab);
  if (eval_batch_graph(m_, {feeds.data(), tokens.size()}, logits, nullptr, ids)) return true;
  if (logits != nullptr) logits->clear();
  return false;
}

// Tiered: a batch below the streaming threshold goes through the hybrid step in pieces
// of up to kHybridMaxTokens; a larger one streams the expert banks once per micro-batch.
uint32_t CudaSequence::micro_batch(uint32_t T) const {
  if (m_.tiering == nullptr) return opt_.micro_batch;
  const uint32_t thr = m_.tiering->options.stream_threshold;
  return thr > 0 && T >= thr ? std::max(opt_.micro_batch, CudaModel::kStreamMicroBatch)
                             : kHybridMaxTokens;
}

// The model's workspace grown for T tokens of this sequence's context. A captured decode
// graph reads the workspace's addresses: eval_token_graph captures again after it moved.
void CudaSequence::ensure_workspace(uint32_t T) { ws_.ensure(workspace_shape(), T); }

// A micro-batch on the stream, synchronously.
void CudaSequence::eval_chunk(std::span<const int32_t> tokens, uint32_t rows, std::vector<float>* logits, Trace* trace) {
  const size_t at = logits->size();
  logits->resize(at + static_cast<size_t>(rows) * m_.hp.n_vocab);
  ensure_workspace(static_cast<uint32_t>(tokens.size()));
  Step step;
  step.host_ids = tokens.data();
  step.T = static_cast<uint32_t>(tokens.size());
  step.rows = rows;
  step.host_logits = logits->data() + at;
  step.trace = trace;
  const SeqRows self{this, 0, step.T, pos_};
  step.seqs = {&self, 1};
  enqueue(step);
  MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  collect_device_times();
  timer_.step_done(step.T);
}

// One decode token by replaying the graph of its span of positions (cuda/decode_graph.h),
// captured first where the span is new. Returns false (nothing done) when graphs are off.
bool CudaSequence::eval_token_graph(int32_t token, std::vector<float>* logits, std::vector<int32_t>* ids) {
  if (!graph_.on()) return false;
  ensure_workspace(1);
  if (graph_ws_generation_ != ws_.generation()) {
    graph_.drop(m_.stream);
    graph_ws_generation_ = ws_.generation();
  }
  const uint32_t cap = graph_cap();
  graph_.capture(cap, m_.stream, [&] {
    Step step;
    step.T = 1;
    step.rows = 1;
    step.host_logits = graph_.logits_out();
    step.host_argmax = graph_.argmax_out();
    step.graph_n_kv_cap = cap;
    const SeqRows self{this, 0, 1, pos_};  // the position is read from the graph's step_dev
    step.seqs = {&self, 1};
    enqueue(step);
  });
  graph_.replay(token, pos_, m_.stream, timer_);
  if (ids != nullptr) {
    ids->assign(1, graph_.pinned_argmax());
  } else {
    logits->assign(graph_.pinned_logits(), graph_.pinned_logits() + m_.hp.n_vocab);
  }
  return true;
}

Status CudaSequence::fork_from(const CudaSequence& from) {
  if (&from.m_ != &m_) return invalid_argument("fork: the sequences belong to different models");
  if (from.kv_.type() != kv_.type()) {
    return invalid_argument(std::string("fork: KV cache types differ (") + type_name(from.kv_.type()) + " vs " +
                            type_name(kv_.type()) + ")");
  }
  if (from.pos_ > n_ctx_) {
    return out_of_range("fork: " + std::to_string(from.pos_) + " positions exceed the context of " +
                        std::to_string(n_ctx_));
  }
  if (&from == this) return {};
  MT_CUDA_CHECK(cudaSetDevice(m_.device));
  kv_.copy_prefix(from.kv_, from.pos_, m_.stream);
  MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  pos_ = from.pos_;
  return {};
}

void CudaSequence::keep_run_rollback(uint32_t max_run) {
  MT_CUDA_CHECK(cudaSetDevice(m_.device));
  MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));  // no run in flight reads the buffers replaced
  kv_.enable_run_log(m_.hp, max_run);
}

Status CudaSequence::truncate(uint32_t n) {
  if (n > pos_) {
    return out_of_range("truncate: position " + std::to_string(n) + " is past the sequence's " + std::to_string(pos_));
  }
  if (n == pos_) return {};
  if (kv_.has_states() && n != 0) {
    const uint32_t pos0 = kv_.logged_pos0(), run = kv_.logged_n();
    if (run == 0 || pos_ != pos0 + run || n < pos0) {
      return invalid_argument("truncate: a recurrent model keeps only its last position's state, so it goes back to 0 "
                              "only (asked " + std::to_string(n) + " of " + std::to_string(pos_) + ")" +
                              (run == 0 ? std::string(" or, with keep_run_rollback, into its last logged run")
                                        : ", or into its last run, positions " + std::to_string(pos0) + " to " +
                                              std::to_string(pos0 + run)));
    }
    MT_CUDA_CHECK(cudaSetDevice(m_.device));
    rollback_run(n - pos0);
    MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
    kv_.set_logged_run(0, 0);
    pos_ = n;
    return {};
  }
  if (kv_.has_states()) {
    MT_CUDA_CHECK(cudaSetDevice(m_.device));
    kv_.reset_states(m_.stream);
    MT_CUDA_CHECK(cudaStreamSynchronize(m_.stream));
  }
  pos_ = n;
  return {};
}

}  // namespace mt::cuda::detail
