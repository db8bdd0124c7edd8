// CudaSequence: a decode token in one cooperative launch (cuda/decode_persistent.h), when
// MOETIER_CUDA_PERSISTENT=1 asks for it and the model is within the kernel's scope; the
// embedding row and the barrier's reset go before it, the logits' copy after.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "core/log.h"
#include "cuda/check.h"
#include "cuda/decode_persistent.h"
#include "cuda/sequence.h"

namespace mt::cuda::detail {

struct CudaSequence::Persistent {
  PersistentArgs args;
  PersistentLaunch cfg;
  DeviceBuffer layers, floats, barrier, route, prof;
  // MOETIER_CUDA_PERSISTENT_PROFILE=1: the phases' summed times (us) over `steps`, logged
  // when the sequence ends.
  std::vector<unsigned long long> stamps;
  std::vector<double> phase_us;
  uint64_t steps = 0;
  ~Persistent();
};

CudaSequence::Persistent::~Persistent() {
  if (steps == 0) return;
  static const char* kNames[kPersistentPhases] = {"", "norm + Q|K|V", "attention", "wo",
                                                  "FFN norm + router", "top-k + gate|up", "SwiGLU + down"};
  std::string msg = "persistent decode phases (us per token, over " + std::to_string(steps) + " tokens):";
  double total = 0;
  for (int p = 1; p < kPersistentPhases; ++p) {
    msg += std::string(" ") + kNames[p] + " " + std::to_string(phase_us[p] / static_cast<double>(steps)) + ";";
    total += phase_us[p];
  }
  msg += " output " + std::to_string(phase_us[0] / static_cast<double>(steps)) + "; total " +
         std::to_string((total + phase_us[0]) / static_cast<double>(steps));
  log_info(msg);
}

CudaSequence::Persistent* CudaSequence::make_persistent() {
  const char* env = std::getenv("MOETIER_CUDA_PERSISTENT");
  if (env == nullptr || std::string(env) != "1") return nullptr;
  if (m_.tiering != nullptr || m_.experts_on_host || pinned_step_ == nullptr) {
    log_warn("persistent decode off: the experts are not all resident, or graphs are off");
    return nullptr;
  }
  const HParams& hp = m_.hp;
  const DeviceWeights& W = m_.w;
  if (std::string why = persistent_unsupported(hp, *m_.arch, W, kv_type_); !why.empty()) {
    log_warn("persistent decode off: " + why);
    return nullptr;
  }
  auto P = new Persistent;
  PersistentArgs& a = P->args;
  const int E = static_cast<int>(hp.n_embd), D = static_cast<int>(hp.head_dim), H = static_cast<int>(hp.n_head);
  const int Q = static_cast<int>(hp.q_dim()), KVd = static_cast<int>(hp.kv_dim());
  const int K = static_cast<int>(hp.n_expert_used), ff = static_cast<int>(hp.n_ff_exp);
  a.n_layer = static_cast<int>(hp.n_layer);
  a.output = pmat(W.output);
  a.output_norm = W.output_norm;
  a.E = E, a.n_head = H, a.n_head_kv = static_cast<int>(hp.n_head_kv), a.head_dim = D;
  a.n_expert = static_cast<int>(hp.n_expert), a.K = K, a.ff = ff;
  a.eps = hp.rms_eps;
  a.attn_scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.n_rot = static_cast<int>(hp.n_rot);
  a.theta_scale = hp.n_rot > 0 ? std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.n_rot)) : 1.0f;
  a.freq_scale = hp.rope_freq_scale;
  a.attn_factor = hp.rope_attn_factor;
  if (hp.yarn_ext != 0.0f) {
    const RopeYarn yarn = rope_yarn(hp, hp.n_rot);
    a.yarn_ext = hp.yarn_ext, a.yarn_lo = yarn.lo, a.yarn_hi = yarn.hi, a.yarn_mscale = yarn.mscale;
  }
  a.neox = m_.arch->rope == RopeStyle::kNeox;
  a.renormalize = m_.arch->renormalize_topk;
  a.kv_row_bytes = kv_row_bytes_;
  a.pos = step_dev_.as<uint32_t>() + 1;
  a.fmax = (std::max({E, Q, K * ff}) + 255) / 256 * 256;
  P->cfg = persistent_launch_config(a);
  if (P->cfg.ctas == 0) {
    log_warn("persistent decode off: the device cannot keep one of its CTAs on every SM (" +
             std::to_string(P->cfg.smem) + " bytes of shared memory)");
    delete P;
    return nullptr;
  }
  // The kernel's chunk count (decode_persistent.cu): at most max(ceil(n_kv / 256), ceil(ctas / n_head)).
  a.max_chunks = static_cast<int>(std::max<uint64_t>((n_ctx_ + kPersistentChunk - 1) / kPersistentChunk,
                                                     (P->cfg.ctas + H - 1) / H));

  std::vector<PLayer> layers(hp.n_layer);
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    const DevLayer& L = W.layers[l];
    PLayer& p = layers[l];
    if (L.wqkv.data != nullptr) {
      p.qkv[0] = pmat(L.wqkv);
      p.n_qkv = 1;
    } else {
      p.qkv[0] = pmat(L.wq), p.qkv[1] = pmat(L.wk), p.qkv[2] = pmat(L.wv);
      p.n_qkv = 3;
    }
    p.qkv_act = p.qkv[0].type;  // the first quantized part's mode (persistent_unsupported: they agree)
    for (int i = p.n_qkv - 1; i >= 0; --i) {
      if (persistent_act_mode(p.qkv[i].type) > 0) p.qkv_act = p.qkv[i].type;
    }
    p.wo = pmat(L.wo), p.router = pmat(L.router);
    p.gate_up = pmat(L.gate_up_exps), p.down = pmat(L.down_exps);
    p.attn_norm = L.attn_norm, p.ffn_norm = L.ffn_norm, p.q_norm = L.q_norm, p.k_norm = L.k_norm;
    p.k_cache = k_[l].as<uint8_t>(), p.v_cache = v_[l].as<uint8_t>();
  }
  P->layers = DeviceBuffer(layers.size() * sizeof(PLayer));
  MT_CUDA_CHECK(cudaMemcpy(P->layers.get(), layers.data(), layers.size() * sizeof(PLayer), cudaMemcpyHostToDevice));
  a.layers = P->layers.as<PLayer>();

  // The step's buffers, one allocation: (shape) floats each, 256-byte aligned.
  const size_t chunks = static_cast<size_t>(H) * a.max_chunks;
  const size_t sizes[] = {static_cast<size_t>(E), static_cast<size_t>(E), static_cast<size_t>(Q + 2 * KVd),
                          static_cast<size_t>(Q), 2 * chunks, chunks * D, static_cast<size_t>(E),
                          static_cast<size_t>(hp.n_expert), static_cast<size_t>(K) * 2 * ff,
                          static_cast<size_t>(K) * E, static_cast<size_t>(hp.n_vocab)};
  size_t total = 0;
  for (size_t n : sizes) total += (n + 63) / 64 * 64;
  P->floats = DeviceBuffer(total * sizeof(float));
  float* at = P->floats.as<float>();
  float* views[std::size(sizes)];
  for (size_t i = 0; i < std::size(sizes); ++i) {
    views[i] = at;
    at += (sizes[i] + 63) / 64 * 64;
  }
  a.x[0] = views[0], a.x[1] = views[1], a.qkv = views[2], a.att = views[3];
  a.ml = reinterpret_cast<float2*>(views[4]), a.acc = views[5], a.y = views[6], a.router = views[7];
  a.gu = views[8], a.d = views[9], a.logits = views[10];
  P->barrier = DeviceBuffer((1 + static_cast<size_t>(H)) * sizeof(unsigned));  // the barrier, the heads' counters
  a.barrier = P->barrier.as<unsigned>();
  a.head_counters = a.barrier + 1;

  P->route = DeviceBuffer(static_cast<size_t>(hp.n_layer) * K * (sizeof(int32_t) + sizeof(float)));
  a.route_ids = P->route.as<int32_t>();
  a.route_wts = reinterpret_cast<float*>(a.route_ids + static_cast<size_t>(hp.n_layer) * K);
  if (const char* pe = std::getenv("MOETIER_CUDA_PERSISTENT_PROFILE"); pe != nullptr && std::string(pe) == "1") {
    P->stamps.resize(static_cast<size_t>(hp.n_layer + 1) * kPersistentPhases);
    P->phase_us.assign(kPersistentPhases, 0.0);
    P->prof = DeviceBuffer(P->stamps.size() * sizeof(unsigned long long));
    a.prof = P->prof.as<unsigned long long>();
  }
  log_info("persistent decode: " + std::to_string(P->cfg.ctas) + " CTAs x " + std::to_string(kPersistentThreads) +
           " threads, " + std::to_string(P->cfg.smem) + " bytes of shared memory each");
  return P;
}

void CudaSequence::PersistentDeleter::operator()(Persistent* p) const { delete p; }

// Returns false (nothing done) when the persistent step is off.
bool CudaSequence::eval_token_persistent(int32_t token, std::vector<float>* logits, Trace* trace) {
  if (persistent_ == nullptr) return false;
  Persistent& P = *persistent_;
  const PersistentArgs& a = P.args;
  cudaStream_t s = m_.stream;
  pinned_step_[0] = static_cast<uint32_t>(token);
  pinned_step_[1] = pos_;
  timer_.mark("persistent step", s);
  MT_CUDA_CHECK(cudaMemcpyAsync(step_dev_.get(), pinned_step_, 2 * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
  const DeviceMatrix& te = m_.w.token_embd;
  get_rows(te.type, te.data, te.row_bytes, step_dev_.as<int32_t>(), 1, static_cast<int>(m_.hp.n_embd), a.x[0], s);
  MT_CUDA_CHECK(cudaMemsetAsync(a.barrier, 0, (1 + m_.hp.n_head) * sizeof(unsigned), s));
  persistent_decode(a, persistent_->cfg, s);
  MT_CUDA_CHECK(cudaMemcpyAsync(pinned_logits_, a.logits, sizeof(float) * m_.hp.n_vocab, cudaMemcpyDeviceToHost, s));
  timer_.mark("end", s);
  MT_CUDA_CHECK(cudaStreamSynchronize(s));
  timer_.step_done(1);
  logits->assign(pinned_logits_, pinned_logits_ + m_.hp.n_vocab);
  const uint32_t L = m_.hp.n_layer, K = m_.hp.n_expert_used;
  if (trace != nullptr) {  // the routing each layer chose
    std::vector<int32_t> ids(static_cast<size_t>(L) * K);
    std::vector<float> wts(ids.size());
    MT_CUDA_CHECK(cudaMemcpy(ids.data(), a.route_ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    MT_CUDA_CHECK(cudaMemcpy(wts.data(), a.route_wts, wts.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (uint32_t l = 0; l < L; ++l) {
      trace->routing(l, pos_, {&ids[static_cast<size_t>(l) * K], K}, {&wts[static_cast<size_t>(l) * K], K});
    }
  }
  if (a.prof != nullptr) {  // phase p of layer l ends at stamp (l, p)
    MT_CUDA_CHECK(cudaMemcpy(P.stamps.data(), a.prof, P.stamps.size() * sizeof(unsigned long long),
                             cudaMemcpyDeviceToHost));
    unsigned long long prev = P.stamps[0];
    for (uint32_t l = 0; l <= L; ++l) {
      for (int p = 1; p < (l < L ? kPersistentPhases : 2); ++p) {
        const unsigned long long t = P.stamps[static_cast<size_t>(l) * kPersistentPhases + p];
        P.phase_us[l < L ? p : 0] += static_cast<double>(t - prev) * 1e-3;
        prev = t;
      }
    }
    ++P.steps;
  }
  return true;
}

}  // namespace mt::cuda::detail
