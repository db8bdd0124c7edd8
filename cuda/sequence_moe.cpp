// CudaSequence: a routed-experts layer (model/ffn.cpp's moe_block twin; see sequence.h):
// the router and top-k in the architecture's math, the grouped expert products over the
// resident matrices (or, tiered, the streamed bank, or through the tiered-expert
// executor the layer's cache slots, staged misses and the CPU's share), the shared
// expert, and the weighted combine (fused into the next norm when the row is wide enough).
#include "cuda/sequence.h"

#include "cuda/kernels/check.h"
#include "cuda/kernels/dispatch.h"
#include "experts/routing_replay.h"

namespace mt::cuda::detail {

void CudaSequence::moe_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, MoeCombineIn& combine) {
  const HParams& hp = m_.hp;
  const ArchInfo& arch = *m_.arch;
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
  const int Ti = p.Ti;
  const int E = static_cast<int>(hp.n_embd), K = static_cast<int>(hp.n_expert_used), X = static_cast<int>(hp.n_expert);
  stage(p, "router");
  const bool plain = hp.gating == ExpertGating::kSoftmax && hp.expert_weights_scale == 1.0f && hp.n_expert_groups <= 1 &&
                     L.exp_probs_b == nullptr && L.router_b == nullptr && hp.renormalize == arch.renormalize_topk;
  if (!plain) {  // sigmoid scores, a selection bias, expert groups or a scale (glm4moe); gpt-oss's math
    mm(L.router, p.h, Ti, p.probs);
    stage(p, "router top-k");
    RouteMath rm;
    rm.sigmoid = hp.gating == ExpertGating::kSigmoid;
    rm.renormalize = hp.renormalize;
    rm.scale = hp.expert_weights_scale;
    rm.n_groups = static_cast<int>(hp.n_expert_groups), rm.n_group_used = static_cast<int>(hp.n_group_used);
    rm.softmax_selected = hp.gating == ExpertGating::kSoftmaxOfSelected;
    rm.logit_bias = L.router_b;
    rm.selection_bias = L.exp_probs_b;
    router_route(p.probs, Ti, X, K, rm, p.sel, p.wts, s);
  } else {
    mm(L.router, p.h, Ti, p.probs);
    stage(p, "router top-k");
    router_topk(p.probs, Ti, X, K, arch.renormalize_topk, p.sel, p.wts, s);
  }
  // Routing replay (experts/routing_replay.h): the stream's ids over the top-k, on the stream.
  if (RoutingReplay* replay = p.st->trace ? p.st->trace->routing_override() : nullptr) {
    m_.routing_replay.apply(*replay, l, T, p.sel, p.wts, s);
  }
  if (p.st->trace && p.st->trace->wants_routing()) {
    p.host_sel.resize(static_cast<size_t>(T) * K);
    p.host_wts.resize(static_cast<size_t>(T) * K);
    MT_CUDA_CHECK(cudaMemcpyAsync(p.host_sel.data(), p.sel, p.host_sel.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(p.host_wts.data(), p.wts, p.host_wts.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
    for (uint32_t t = 0; t < T; ++t) {
      p.st->trace->routing(l, p.pos_of(t), {&p.host_sel[static_cast<size_t>(t) * K], static_cast<size_t>(K)},
                        {&p.host_wts[static_cast<size_t>(t) * K], static_cast<size_t>(K)});
    }
  }
  // Where the experts' bytes are read: resident, or (tiered) this layer's streamed bank
  // (prefill) or, through the executor, its cache slots and staged misses (hybrid).
  if (m_.tiering != nullptr && p.stream_step) {
    const int buf = staged_buf_;
    m_.tiering->cache->wait_staged(buf, s);
    const ProductSet set{m_.tiering->cache->staged(buf), p.sel};
    expert_products(p, L, hx, {&set, 1});
    m_.tiering->cache->release_staged(staged_buf_, s);
    stage_next_layer(l);
  } else if (m_.tiering != nullptr) {
    hybrid_layer(p, L, l, hx);
  } else {
    const ProductSet set{{L.gate_exps, L.up_exps, L.down_exps, L.gate_up_exps}, p.sel};
    expert_products(p, L, hx, {&set, 1});
  }
  stage(p, "shared + combine");  // moe_combine (+ the shared expert)
  const bool shared = L.shexp_up.data != nullptr;
  if (shared) ffn_dense(L.shexp_gate_up, L.shexp_gate, L.shexp_up, L.shexp_down, hx, p.gus, p.us, p.ds);
  if (E >= 256 && add_rms_norm_quant_supports(E, ActQuant::kQ8_0)) {  // fused into the norm below
    combine.d = p.d, combine.weights = p.wts, combine.K = K;
    combine.d_sh = shared ? p.ds : nullptr, combine.gate_inp = L.shexp_gate_inp, combine.h = p.h;
  } else {
    const MoeCombineIn c{p.d, p.wts, K, shared ? p.ds : nullptr, L.shexp_gate_inp, p.h};
    moe_combine(c, Ti, E, p.y, s);
  }
}

void CudaSequence::expert_products(Pass& p, const DevLayer& L, const ActRows& hx, std::span<const ProductSet> sets) {
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
  const int E = static_cast<int>(m_.hp.n_embd), K = static_cast<int>(m_.hp.n_expert_used);
  const int ff = static_cast<int>(L.up_exps.n_out);
  const int n_sets = static_cast<int>(sets.size());
  const int64_t slots = static_cast<int64_t>(T) * K;
  stage(p, "experts gate+up");
  // Each set's slots grouped by expert once for both of its products (the grouped mmvq,
  // cuda/kernels/mmvq.h mmvq_groups_slots), in scratch given back at the end.
  const size_t groups_mark = ws_->mark();
  const int32_t* groups[2] = {nullptr, nullptr};
  MT_CHECK(sets.size() <= 2);
  for (size_t i = 0; i < sets.size(); ++i) {
    const ExpertViews& v = sets[i].m;
    const DeviceMatrix& first = v.gate_up.data != nullptr ? v.gate_up : v.up;
    if (matmul_experts_grouped(first, static_cast<int>(T)) && matmul_experts_grouped(v.down, static_cast<int>(T)) &&
        first.n_mat == v.down.n_mat) {
      auto* g = static_cast<int32_t*>(ws_->take(expert_groups_bytes(static_cast<int>(slots), v.down.n_mat), 256));
      launch_expert_groups(sets[i].ids, static_cast<int>(slots), v.down.n_mat, g, s);
      groups[i] = g;
    }
  }
  ActRows act;  // (T*K, ff) the down projection's input
  act.x = p.u;
  act.rows = static_cast<int>(slots);
  if (n_sets > 0) {
    const ExpertViews& shape = sets[0].m;  // every set has the layer's types and shapes
    const QuantType dt = shape.down.type;
    const bool oai = L.swiglu_oai;  // gpt-oss: per-expert biases and the clamped SwiGLU
    const bool quant_down = !oai && T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(dt) &&
                            swiglu_pairs_quant_supports(ff, act_quant_for(dt));
    if (shape.gate_up.data != nullptr) {
      for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.gate_up, sets[i].ids, K, hx, p.gu, false, groups[i]);
      if (oai) {  // every slot's bias by its expert (the CPU's rows are replaced later)
        add_expert_bias(p.gu, slots, ff, 2 * ff, p.sel, L.gate_exps_b, s);
        add_expert_bias(p.gu + ff, slots, ff, 2 * ff, p.sel, L.up_exps_b, s);
        swiglu_oai_pairs(p.gu, slots, ff, p.u, s);
      } else if (quant_down) {
        act.quantized = true;
        act.mode = act_quant_for(dt);
        act.qs = p.uq;
        act.meta = p.um;
        swiglu_pairs_quant(p.gu, slots, ff, p.u, act.mode, p.uq, p.um, s);
      } else {
        swiglu_pairs(p.gu, slots, ff, p.u, s);
      }
    } else {
      for (int i = 0; i < n_sets; ++i) {
        if (sets[i].m.gate.data) mm_experts(sets[i].m.gate, sets[i].ids, K, hx, p.gu, false, groups[i]);
        mm_experts(sets[i].m.up, sets[i].ids, K, hx, p.u, false, groups[i]);
      }
      if (oai) {
        add_expert_bias(p.gu, slots, ff, ff, p.sel, L.gate_exps_b, s);
        add_expert_bias(p.u, slots, ff, ff, p.sel, L.up_exps_b, s);
        swiglu_oai(p.gu, p.u, slots * ff, s);
      } else {
        swiglu(shape.gate.data ? p.gu : nullptr, p.u, slots * ff, s);
      }
    }
    stage(p, "experts down");
    for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.down, sets[i].ids, K, act, p.d, /*per_slot=*/true, groups[i]);
    if (oai) add_expert_bias(p.d, slots, E, E, p.sel, L.down_exps_b, s);
  }
  ws_->rewind(groups_mark);
}

}  // namespace mt::cuda::detail
