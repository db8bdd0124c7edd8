// A model's step workspace: one bump allocation (cuda/kernels/memory.h Workspace) sized
// for the largest pass and the longest context seen so far, grown (never shrunk) when a
// larger one comes; shared by the model's sequences, whose passes run one at a time.
// Its size (step_workspace_bytes) covers a step's buffers (CudaSequence::Pass), the
// products' and attention's scratch over every matrix of the model, the Gated DeltaNet
// mixer's and latent attention's buffers; running out is a broken invariant (the
// workspace aborts with file:line).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/device_weights.h"
#include "cuda/kernels/memory.h"
#include "model/hparams.h"

namespace mt::cuda {

// Logits rows per output product: one (kLogitRows, n_vocab) buffer of the workspace.
inline constexpr uint32_t kLogitRows = 256;

// What sizes a step's workspace: the model's shapes and device matrices, the sequence's
// context.
struct WorkspaceShape {
  const HParams* hp = nullptr;
  const DeviceWeights* w = nullptr;
  bool experts_on_host = false;  // tiered experts: their products' scratch by their shapes
  uint32_t n_ctx = 0;
};
size_t step_workspace_bytes(const WorkspaceShape& s, uint32_t T);
// Latent attention's share for T tokens (0 for other models; cuda/sequence_mla.cpp).
size_t mla_workspace_bytes(const HParams& hp, const DeviceWeights& w, uint32_t T);

class StepWorkspace {
 public:
  // Room for T tokens (at least 8) of a sequence of s.n_ctx positions. True when it was
  // (re)allocated: the addresses a captured graph holds changed (generation() moves).
  bool ensure(const WorkspaceShape& s, uint32_t T);
  uint32_t tokens() const { return tokens_; }
  uint64_t generation() const { return generation_; }
  Workspace& operator*() const { return *ws_; }
  Workspace* operator->() const { return ws_.get(); }

 private:
  std::unique_ptr<Workspace> ws_;
  uint32_t tokens_ = 0, n_ctx_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace mt::cuda
