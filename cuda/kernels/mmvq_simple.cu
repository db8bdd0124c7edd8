// MMVQ kernels of the 32-element formats (cuda/kernels/mmvq_simple.cuh), one launcher per type.
#include "cuda/kernels/mmvq_simple.cuh"

namespace mt::cuda {

#define MT_MMVQ_LAUNCHER(Block)                                        \
  template <>                                                          \
  void launch_mmvq<Block>(const MmvqArgs& a, cudaStream_t stream) {    \
    mmvq_detail::launch_quant<mmvq_detail::MmvqType<Block>>(a, stream); \
  }

MT_MMVQ_LAUNCHER(BlockQ4_0)
MT_MMVQ_LAUNCHER(BlockQ4_1)
MT_MMVQ_LAUNCHER(BlockQ5_0)
MT_MMVQ_LAUNCHER(BlockQ5_1)
MT_MMVQ_LAUNCHER(BlockQ8_0)
MT_MMVQ_LAUNCHER(BlockIQ4_NL)
MT_MMVQ_LAUNCHER(BlockMXFP4)

#undef MT_MMVQ_LAUNCHER

}  // namespace mt::cuda
