// CudaSequence: the tiered MoE layers (cuda/tiering.h): a hybrid layer-step through the
// tiered-expert executor over the GPU device (cuda/tiering_device.h), prefill
// streaming's staging, telemetry (see sequence.h).
#include "cuda/sequence.h"

#include "core/check.h"
#include "cuda/kernels/check.h"

namespace mt::cuda::detail {

// The routing to the host (the layer-step's one host wait), then the executor: the
// device's group runs this layer's grouped products (expert_products) over the slots and
// the staged experts, the CPU computes its experts meanwhile, and their rows are
// scattered into p.d.
void CudaSequence::hybrid_layer(Pass& p, const DevLayer& L, uint32_t l, const ActRows& hx) {
  CudaTiering& tier = *m_.tiering;
  CudaExpertDevice& dev = *tier.gpu;
  struct Products final : GroupProducts {
    Products(CudaSequence& s, Pass& pass, const DevLayer& layer, const ActRows& rows)
        : seq(s), p(pass), L(layer), hx(rows) {}
    void launch(std::span<const ProductSet> sets) override { seq.expert_products(p, L, hx, sets); }
    CudaSequence& seq;
    Pass& p;
    const DevLayer& L;
    const ActRows& hx;
  } products(*this, p, L, hx);
  const LayerStep step = dev.fetch_routing(l, p.T, p.sel, p.h, m_.stream);
  dev.begin_layer({m_.stream, &products, p.d});
  tier.executor->run(step);
}

// Prefill streaming: queues the bank of the first MoE layer after `after` (-1: the
// first MoE layer) into the free staging buffer; staged_buf_ names it.
void CudaSequence::stage_next_layer(int64_t after) {
  for (uint32_t l = static_cast<uint32_t>(after + 1); l < m_.hp.n_layer; ++l) {
    if (!m_.w.layers[l].moe) continue;
    staged_buf_ = m_.tiering->cache->stage_layer(l);
    return;
  }
}

// Device time of this step's hybrid expert products per layer (events read after the
// step's final synchronisation) into the executor's timing.
void CudaSequence::collect_device_times() {
  if (m_.tiering == nullptr) return;
  m_.tiering->gpu->collect_times(*m_.tiering->executor);
}

}  // namespace mt::cuda::detail
