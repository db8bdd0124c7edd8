// Activation rows f32 -> Q8_1 (cuda/mmvq_kernels.h Q8_1Rows), bit-exact with quant/'s
// reference quantize_row(Q8_1): per 32 elements d = amax / 127, id = 1 / d (0 when d is
// 0 or the inverse is not finite), q = roundf(x * id) clamped to +-127 (NaN -> 0),
// s = float(sum q) * d; d and s rounded to half; plus the int sums of each 16 quants.
// One warp per block: lane j holds element j, the max and the sums are warp reductions
// (exact), every float operation is a single IEEE operation (no FMA can form), so the
// bytes equal the reference's.
#include <cuda_fp16.h>

#include "cuda/check.h"
#include "cuda/mmvq_kernels.h"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;  // 8 blocks of 32 per CTA

__global__ void __launch_bounds__(kThreads) quantize_q8_1_kernel(const float* x, int n_in, int8_t* qs,
                                                                  uint2* meta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n_in) return;  // n_in % 32 == 0: whole warps leave
  const int64_t at = static_cast<int64_t>(blockIdx.y) * n_in + i;
  const float v = x[at];
  float amax = fmaxf(fabsf(v), 0.f);  // NaN counts as 0, as in the reference's comparison
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f;
  float id = d == 0.f ? 0.f : 1.f / d;
  if (!isfinite(id)) id = 0.f;
  const float r = roundf(v * id);
  const int q = r != r ? 0 : static_cast<int>(fminf(fmaxf(r, -127.f), 127.f));
  qs[at] = static_cast<int8_t>(q);
  int half_sum = q;  // over lanes 0..15 or 16..31
  for (int o = 8; o > 0; o >>= 1) half_sum += __shfl_xor_sync(0xffffffffu, half_sum, o);
  const int hi = __shfl_sync(0xffffffffu, half_sum, 16);
  if ((threadIdx.x & 31) == 0) {
    const int sum = half_sum + hi;
    const uint32_t dh = __half_as_ushort(__float2half_rn(d));
    const uint32_t sh = __half_as_ushort(__float2half_rn(__fmul_rn(static_cast<float>(sum), d)));
    meta[at / 32] = make_uint2(dh | (sh << 16), (static_cast<uint32_t>(half_sum) & 0xFFFFu) | (static_cast<uint32_t>(hi) << 16));
  }
}

}  // namespace

void launch_quantize_q8_1(const float* x, int rows, int n_in, Q8_1Rows out, cudaStream_t stream) {
  if (rows <= 0 || n_in <= 0) return;
  const dim3 grid(static_cast<unsigned>((n_in + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  quantize_q8_1_kernel<<<grid, kThreads, 0, stream>>>(x, n_in, out.qs, out.meta);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mt::cuda
