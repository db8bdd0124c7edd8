// CudaSequence: a routed-experts layer (model/ffn.cpp's moe_block twin; see sequence.h):
// the router and top-k in the architecture's math, the grouped expert products over the
// resident matrices (or, tiered, the layer's cache slots, the CPU's share and the
// streamed bank), the shared expert, and the weighted combine (fused into the next norm
// when the row is wide enough).
#include "cuda/sequence.h"

#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

void CudaSequence::moe_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx, MoeCombineIn& combine) {
  const HParams& hp = m_.hp;
  const ArchInfo& arch = *m_.arch;
  cudaStream_t s = m_.stream;
  const uint32_t T = p.T;
  const int Ti = p.Ti;
  const int E = static_cast<int>(hp.n_embd), K = static_cast<int>(hp.n_expert_used), X = static_cast<int>(hp.n_expert);
  const int ff = static_cast<int>(L.up_exps.n_out);
  stage(p, "router");  // (unless a segment graph launched it)
  const bool plain = hp.gating == ExpertGating::kSoftmax && hp.expert_weights_scale == 1.0f && hp.n_expert_groups <= 1 &&
                     L.exp_probs_b == nullptr && L.router_b == nullptr && hp.renormalize == arch.renormalize_topk;
  if (p.replay) {
    // (launched by a segment graph)
  } else if (!plain) {  // sigmoid scores, a selection bias, expert groups or a scale (glm4moe); gpt-oss's math
    mm(L.router, p.h, Ti, p.probs);
    stage(p, "router top-k");
    RouteMath rm;
    rm.sigmoid = hp.gating == ExpertGating::kSigmoid;
    rm.renormalize = hp.renormalize;
    rm.scale = hp.expert_weights_scale;
    rm.n_groups = static_cast<int>(hp.n_expert_groups), rm.n_group_used = static_cast<int>(hp.n_group_used);
    rm.softmax_selected = hp.gating == ExpertGating::kSoftmaxOfSelected;
    rm.logit_bias = L.router_b;
    router_route(p.probs, Ti, X, K, rm, L.exp_probs_b, p.sel, p.wts, s);
  } else {
    mm(L.router, p.h, Ti, p.probs);
    stage(p, "router top-k");
    router_topk(p.probs, Ti, X, K, arch.renormalize_topk, p.sel, p.wts, s);
  }
  if (p.st->trace) {
    flush_cpu_part();  // the stream may wait on the previous layer-step's CPU rows
    p.host_sel.resize(static_cast<size_t>(T) * K);
    p.host_wts.resize(static_cast<size_t>(T) * K);
    MT_CUDA_CHECK(cudaMemcpyAsync(p.host_sel.data(), p.sel, p.host_sel.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaMemcpyAsync(p.host_wts.data(), p.wts, p.host_wts.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    MT_CUDA_CHECK(cudaStreamSynchronize(s));
    for (uint32_t t = 0; t < T; ++t) {
      p.st->trace->routing(l, pos_ + t, {&p.host_sel[static_cast<size_t>(t) * K], static_cast<size_t>(K)},
                        {&p.host_wts[static_cast<size_t>(t) * K], static_cast<size_t>(K)});
    }
  }
  const int64_t slots = static_cast<int64_t>(T) * K;
  // Where the experts' bytes are read: resident, or (tiered) this layer's cache slots
  // (hybrid: ids become slot ids, -1 for the CPU's) or its streamed bank (prefill).
  ExpertMats em{L.gate_exps, L.up_exps, L.down_exps, L.gate_up_exps};
  const int32_t* ids = p.sel;
  HybridPart cpu_part;
  if (m_.tiering != nullptr && p.stream_step) {
    const int buf = staged_buf_;
    m_.tiering->cache->wait_staged(buf, s);
    em = mats_of(m_.tiering->cache->staged(buf));
  } else if (m_.tiering != nullptr) {
    cpu_part = place_hybrid(p, l, T, p.sel, p.h, p.wts);
    em = mats_of(m_.tiering->cache->slots(l));
    ids = slot_ids_dev_.as<int32_t>();
  }
  // The grouped products run over one or two sets of expert matrices: the resident /
  // slot / streamed ones, and (stream mode) the staged misses; each set's ids leave
  // the other's rows alone (-1), so one SwiGLU serves both.
  struct ProductSet {
    ExpertMats m;
    const int32_t* ids;
  };
  ProductSet sets[2];
  int n_sets = 0;
  if (m_.tiering == nullptr || p.stream_step || cpu_part.n_device > 0) sets[n_sets++] = {em, ids};
  if (cpu_part.staged_buf >= 0) {
    m_.tiering->cache->wait_staged(cpu_part.staged_buf, s);
    sets[n_sets++] = {mats_of(m_.tiering->cache->staged(cpu_part.staged_buf)), stage_ids_dev_.as<int32_t>()};
  }
  stage(p, "experts gate+up");
  ActRows act;  // (T*K, ff) the down projection's input
  act.x = p.u;
  act.rows = static_cast<int>(slots);
  if (n_sets > 0) {
    const ExpertMats& shape = sets[0].m;  // every set has the layer's types and shapes
    const QuantType dt = shape.down.type;
    const bool oai = L.swiglu_oai;  // gpt-oss: per-expert biases and the clamped SwiGLU
    const bool quant_down = !oai && T <= static_cast<uint32_t>(kMmvqMaxTokens) && quantizes_activations(dt) &&
                            swiglu_pairs_quant_supports(ff, act_quant_for(dt));
    if (shape.gate_up.data != nullptr) {
      for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.gate_up, sets[i].ids, K, hx, p.gu);
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
        if (sets[i].m.gate.data) mm_experts(sets[i].m.gate, sets[i].ids, K, hx, p.gu);
        mm_experts(sets[i].m.up, sets[i].ids, K, hx, p.u);
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
    for (int i = 0; i < n_sets; ++i) mm_experts(sets[i].m.down, sets[i].ids, K, act, p.d, /*per_slot=*/true);
    if (oai) add_expert_bias(p.d, slots, E, E, p.sel, L.down_exps_b, s);
  }
  if (cpu_part.staged_buf >= 0) m_.tiering->cache->release_staged(cpu_part.staged_buf, s);
  if (m_.tiering != nullptr && p.stream_step) {
    m_.tiering->cache->release_staged(staged_buf_, s);
    stage_next_layer(l);
  } else if (m_.tiering != nullptr) {
    finish_hybrid(p, l, T, cpu_part, p.d);  // (a segment graph step: its next segment begins)
  }
  stage(p, "shared + combine");  // moe_combine (+ the shared expert)
  const bool shared = L.shexp_up.data != nullptr;
  if (shared && !p.replay) ffn_dense(L.shexp_gate_up, L.shexp_gate, L.shexp_up, L.shexp_down, hx, p.gus, p.us, p.ds);
  if (E >= 256 && add_rms_norm_quant_supports(E, ActQuant::kQ8_0)) {  // fused into the norm below
    combine.d = p.d, combine.weights = p.wts, combine.K = K;
    combine.d_sh = shared ? p.ds : nullptr, combine.gate_inp = L.shexp_gate_inp, combine.h = p.h;
  } else if (!p.replay) {
    moe_combine(p.d, p.wts, Ti, K, E, shared ? p.ds : nullptr, L.shexp_gate_inp, p.h, p.y, s);
  }
}

}  // namespace mt::cuda::detail
