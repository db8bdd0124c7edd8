// MMVQ kernels of the K-quants and IQ4_XS (cuda/kernels/mmvq_kquants.cuh), one launcher per type.
#include "cuda/kernels/mmvq_kquants.cuh"

namespace mt::cuda {

#define MT_MMVQ_LAUNCHER(Block)                                        \
  template <>                                                          \
  void launch_mmvq<Block>(const MmvqArgs& a, cudaStream_t stream) {    \
    mmvq_detail::launch_quant<mmvq_detail::MmvqType<Block>>(a, stream); \
  }

MT_MMVQ_LAUNCHER(BlockQ2_K)
MT_MMVQ_LAUNCHER(BlockQ3_K)
MT_MMVQ_LAUNCHER(BlockQ4_K)
MT_MMVQ_LAUNCHER(BlockQ5_K)
MT_MMVQ_LAUNCHER(BlockQ6_K)
MT_MMVQ_LAUNCHER(BlockIQ4_XS)

#undef MT_MMVQ_LAUNCHER

}  // namespace mt::cuda
