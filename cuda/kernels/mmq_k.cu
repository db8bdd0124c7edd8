// MMQ weight decoding of the K-quants Q4_K, Q5_K, Q6_K (cuda/kernels/mmq_common.cuh): a stage is
// one 256-element super-block, half h its elements 128h .. 128h + 127. Layouts as
// quant/blocks.h and cpu/k_quants_scalar.cpp's decoders:
//   Q4_K  d, dmin, scales[12], qs[128]: qs[32c + l] holds element 64c + l (low nibble,
//         sub-block 2c) and 64c + 32 + l (high, sub-block 2c + 1); half h = chunks 2h,
//         2h + 1 = qs[64h, +64). Scale / min j (6 bits each) unpacked from the 12 bytes
//         u0 | u1 | u2: j < 4: u0 byte j & 63, u1 byte j & 63; j >= 4: u2 byte j-4 low
//         nibble | u0 byte j-4 bits 6-7 << 4, u2 byte j-4 high nibble | u1 byte j-4 bits
//         6-7 << 4. value = d * sc * code - dmin * m.
//   Q5_K  Q4_K plus qh[32] after the scales: bit 2c (2c + 1) of qh[l] is the fifth bit of
//         element 64c + l (64c + 32 + l).
//   Q6_K  ql[128], qh[64], scales[16] (int8, one per 16 elements), d: for half h, l < 32:
//         element 128h + l     = ql[64h + l] low  | qh[32h + l] bits 0-1 << 4,
//                 128h + 32 + l = ql[64h + 32 + l] low  | bits 2-3 << 4,
//                 128h + 64 + l = ql[64h + l] high | bits 4-5 << 4,
//                 128h + 96 + l = ql[64h + 32 + l] high | bits 6-7 << 4; code - 32.
// Q4_K / Q5_K codes are 0..31 with the min term separate (scale d * sc, min dmin * m per
// 32); Q6_K's are -32..31 with scale d * sc per 16. Activation mode kQ8_K; the kernel
// reads each 32-block's d from its meta, so the per-256 d needs no special case.
#include "cuda/kernels/mmq_common.cuh"

namespace mt::cuda {
namespace mmq_detail {
namespace {

// Q4_K / Q5_K: sub-blocks 4h .. 4h + 3's scales (bytes of *sw) and mins (*mw) from the
// 12 packed bytes u[0..2].
__device__ __forceinline__ void scale_min_half(const uint32_t (&u)[3], int h, uint32_t* sw, uint32_t* mw) {
  if (h == 0) {
    *sw = u[0] & 0x3F3F3F3Fu;
    *mw = u[1] & 0x3F3F3F3Fu;
  } else {
    *sw = (u[2] & 0x0F0F0F0Fu) | ((u[0] >> 2) & 0x30303030u);
    *mw = ((u[2] >> 4) & 0x0F0F0F0Fu) | ((u[1] >> 2) & 0x30303030u);
  }
}

// Header words d | dmin << 16, scales u[0..2] -> the half's 4 scales and mins as floats.
__device__ __forceinline__ void scales_q45(const uint32_t (&hd)[4], int h, float (&sc)[4], float (&mn)[4]) {
  const float d = h2f(hd[0]), dmin = h2f(hd[0] >> 16);
  const uint32_t u[3] = {hd[1], hd[2], hd[3]};
  uint32_t sw, mw;
  scale_min_half(u, h, &sw, &mw);
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    sc[l] = d * static_cast<float>((sw >> (8 * l)) & 0xFFu);
    mn[l] = dmin * static_cast<float>((mw >> (8 * l)) & 0xFFu);
  }
}

struct TrQ4_K {  // d@0 dmin@2 scales@4 qs@16, 144 bytes
  static constexpr bool kMin = true, kHalf16 = false;
  __device__ static void decode(const uint8_t* row, int st, int h, int, uint32_t (&q)[32], float (&sc)[4],
                                float (&mn)[4]) {
    const uint8_t* b = row + static_cast<int64_t>(st) * 144;
    uint32_t hd[4], qs[16];
    load_words<4>(b, 16, hd);
    load_words<16>(b + 16 + 64 * h, 64, qs);
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {  // chunk 2h + cc: local sub-blocks 2cc (low), 2cc + 1 (high)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        q[16 * cc + i] = qs[8 * cc + i] & 0x0F0F0F0Fu;
        q[16 * cc + 8 + i] = (qs[8 * cc + i] >> 4) & 0x0F0F0F0Fu;
      }
    }
    scales_q45(hd, h, sc, mn);
  }
};

struct TrQ5_K {  // d@0 dmin@2 scales@4 qh@16 qs@48, 176 bytes
  static constexpr bool kMin = true, kHalf16 = false;
  __device__ static void decode(const uint8_t* row, int st, int h, int, uint32_t (&q)[32], float (&sc)[4],
                                float (&mn)[4]) {
    const uint8_t* b = row + static_cast<int64_t>(st) * 176;
    uint32_t hd[4], qh[8], qs[16];
    load_words<4>(b, 16, hd);
    load_words<8>(b + 16, 32, qh);
    load_words<16>(b + 48 + 64 * h, 64, qs);
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const int c = 2 * h + cc;  // chunk: fifth bits 2c (low nibbles) and 2c + 1 (high)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t lo5 = ((qh[i] >> (2 * c)) & 0x01010101u) << 4;
        const uint32_t hi5 = ((qh[i] >> (2 * c + 1)) & 0x01010101u) << 4;
        q[16 * cc + i] = (qs[8 * cc + i] & 0x0F0F0F0Fu) | lo5;
        q[16 * cc + 8 + i] = ((qs[8 * cc + i] >> 4) & 0x0F0F0F0Fu) | hi5;
      }
    }
    scales_q45(hd, h, sc, mn);
  }
};

struct TrQ6_K {  // ql@0 qh@128 scales@192 d@208, 210 bytes
  static constexpr bool kMin = false, kHalf16 = true;
  __device__ static void decode(const uint8_t* row, int st, int h, int, uint32_t (&q)[32], float (&sc)[8],
                                float (&)[4]) {
    const uint8_t* b = row + static_cast<int64_t>(st) * 210;
    uint32_t ql[16], qh[8], s8[2], dw[1];
    load_words<16>(b + 64 * h, 64, ql);
    load_words<8>(b + 128 + 32 * h, 32, qh);
    load_words<2>(b + 192 + 8 * h, 8, s8);
    load_words<1>(b + 208, 2, dw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // elements 4i .. 4i + 3 of each quarter
      q[i] = __vsub4((ql[i] & 0x0F0F0F0Fu) | ((qh[i] & 0x03030303u) << 4), 0x20202020u);
      q[8 + i] = __vsub4((ql[8 + i] & 0x0F0F0F0Fu) | (((qh[i] >> 2) & 0x03030303u) << 4), 0x20202020u);
      q[16 + i] = __vsub4(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> 4) & 0x03030303u) << 4), 0x20202020u);
      q[24 + i] = __vsub4(((ql[8 + i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> 6) & 0x03030303u) << 4), 0x20202020u);
    }
    const float d = h2f(dw[0]);
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // scale of local elements 16k .. 16k + 15
      sc[k] = d * static_cast<float>(static_cast<int8_t>(s8[k / 4] >> (8 * (k % 4))));
    }
  }
};

}  // namespace
}  // namespace mmq_detail

MT_MMQ_DEFINE(BlockQ4_K, TrQ4_K, 16)
MT_MMQ_DEFINE(BlockQ4_K, TrQ4_K, 32)
MT_MMQ_DEFINE(BlockQ4_K, TrQ4_K, 64)
MT_MMQ_DEFINE(BlockQ5_K, TrQ5_K, 16)
MT_MMQ_DEFINE(BlockQ5_K, TrQ5_K, 32)
MT_MMQ_DEFINE(BlockQ5_K, TrQ5_K, 64)
MT_MMQ_DEFINE(BlockQ6_K, TrQ6_K, 16)
MT_MMQ_DEFINE(BlockQ6_K, TrQ6_K, 32)
MT_MMQ_DEFINE(BlockQ6_K, TrQ6_K, 64)
#undef MT_MMQ_DEFINE

}  // namespace mt::cuda
