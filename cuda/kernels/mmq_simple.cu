// MMQ weight decoding of the 32-element formats Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4
// (cuda/kernels/mmq_common.cuh):
// half h of stage st is blocks 8 st + 4h .. +3 of the row, contiguous bytes read as
// little-endian words; block bb's codes go to q[8bb .. 8bb + 7] (element 4i .. 4i + 3
// of the block in q[8bb + i]) as signed int8, its scale d to sc[bb]. Activation mode
// kQ8_0 (per-32 d); the offsets (-8, -16) are applied to the codes, so no min terms.
// Layouts as quant/blocks.h: Q4_0 = d, qs[16] (byte j: element j low nibble, j + 16
// high); Q5_0 = d, qh[4] (bit j: element j's fifth bit), qs[16]; Q8_0 = d, qs[32];
// IQ4_NL = d, qs[16] and MXFP4 = e (E8M0), qs[16]: Q4_0's nibbles through their
// non-linear tables (int8 values; MXFP4's doubled, its scale the E8M0 power halved, as
// the CPU's dot and cuda/kernels/mmvq_simple.cuh take them).
#include "cuda/kernels/mmq_common.cuh"
#include "cuda/kernels/mmvq_simple.cuh"

namespace mt::cuda {
namespace mmq_detail {
namespace {

// Bits 0..3 of b to bit 4 of bytes 0..3: the multiply puts copies of b at bits 0, 7, 14
// and 21 (no two set bits meet, so no carries), bit k of copy k landing at bit 8k.
__device__ __forceinline__ uint32_t bit4_to_bytes(uint32_t b) {
  return (((b & 0xFu) * 0x00204081u) & 0x01010101u) << 4;
}

// The half's blocks as words: kBlock bytes each, nb - 4h of them valid (0..4).
template <int kBlock, int N>
__device__ __forceinline__ void load_half(const uint8_t* row, int st, int h, int nb, uint32_t (&w)[N]) {
  static_assert(4 * N >= 4 * kBlock, "four blocks");
  const int first = kStageBlocks * st + 4 * h;
  const int valid = max(0, min(4, nb - 4 * h));
  load_words<N>(row + static_cast<int64_t>(first) * kBlock, valid * kBlock, w);
}

struct TrQ4_0 {
  static constexpr bool kMin = false, kHalf16 = false;
  __device__ static void decode(const uint8_t* row, int st, int h, int nb, uint32_t (&q)[32], float (&sc)[4],
                                float (&)[4]) {
    uint32_t w[18];  // 4 x 18 bytes
    load_half<18>(row, st, h, nb, w);
    static_for<0, 4>([&](auto bb_) {
      constexpr int bb = decltype(bb_)::value, at = 18 * bb;
      sc[bb] = h2f(word_at<at>(w));
      static_for<0, 4>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        const uint32_t v = word_at<at + 2 + 4 * i>(w);
        q[8 * bb + i] = __vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
        q[8 * bb + 4 + i] = __vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
      });
    });
  }
};

struct TrQ5_0 {
  static constexpr bool kMin = false, kHalf16 = false;
  __device__ static void decode(const uint8_t* row, int st, int h, int nb, uint32_t (&q)[32], float (&sc)[4],
                                float (&)[4]) {
    uint32_t w[22];  // 4 x 22 bytes
    load_half<22>(row, st, h, nb, w);
    static_for<0, 4>([&](auto bb_) {
      constexpr int bb = decltype(bb_)::value, at = 22 * bb;
      sc[bb] = h2f(word_at<at>(w));
      const uint32_t qh = word_at<at + 2>(w);
      static_for<0, 4>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        const uint32_t v = word_at<at + 6 + 4 * i>(w);
        q[8 * bb + i] = __vsub4((v & 0x0F0F0F0Fu) | bit4_to_bytes(qh >> (4 * i)), 0x10101010u);
        q[8 * bb + 4 + i] = __vsub4(((v >> 4) & 0x0F0F0F0Fu) | bit4_to_bytes(qh >> (16 + 4 * i)), 0x10101010u);
      });
    });
  }
};

struct TrQ8_0 {
  static constexpr bool kMin = false, kHalf16 = false;
  __device__ static void decode(const uint8_t* row, int st, int h, int nb, uint32_t (&q)[32], float (&sc)[4],
                                float (&)[4]) {
    uint32_t w[34];  // 4 x 34 bytes
    load_half<34>(row, st, h, nb, w);
    static_for<0, 4>([&](auto bb_) {
      constexpr int bb = decltype(bb_)::value, at = 34 * bb;
      sc[bb] = h2f(word_at<at>(w));
      static_for<0, 8>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        q[8 * bb + i] = word_at<at + 2 + 4 * i>(w);
      });
    });
  }
};

// Q4_0's layout with the nibbles looked up in Table; the scale by Scale(block bytes' word).
template <int kBlock, class Table, class Scale>
struct TrTable4 {
  static constexpr bool kMin = false, kHalf16 = false;
  static constexpr int kQs = kBlock - 16;  // the codes' offset in the block
  __device__ static void decode(const uint8_t* row, int st, int h, int nb, uint32_t (&q)[32], float (&sc)[4],
                                float (&)[4]) {
    uint32_t w[kBlock];  // 4 x kBlock bytes
    load_half<kBlock>(row, st, h, nb, w);
    static_for<0, 4>([&](auto bb_) {
      constexpr int bb = decltype(bb_)::value, at = kBlock * bb;
      sc[bb] = Scale::of(word_at<at>(w));
      static_for<0, 4>([&](auto i_) {
        constexpr int i = decltype(i_)::value;
        mmvq_detail::lookup_word<Table>(word_at<at + kQs + 4 * i>(w), q[8 * bb + i], q[8 * bb + 4 + i]);
      });
    });
  }
};
struct HalfScale {  // fp16 d in the block's first two bytes
  __device__ static float of(uint32_t word) { return h2f(word); }
};
struct E8m0HalfScale {  // the E8M0 byte first: 2^(e - 127) / 2
  __device__ static float of(uint32_t word) { return __uint_as_float(e8m0_half_bits(static_cast<uint8_t>(word & 0xFFu))); }
};
using TrIQ4_NL = TrTable4<18, mmvq_detail::Iq4Table, HalfScale>;
using TrMXFP4 = TrTable4<17, mmvq_detail::Fp4Table, E8m0HalfScale>;

}  // namespace
}  // namespace mmq_detail

MT_MMQ_DEFINE(BlockIQ4_NL, TrIQ4_NL, 16)
MT_MMQ_DEFINE(BlockIQ4_NL, TrIQ4_NL, 32)
MT_MMQ_DEFINE(BlockIQ4_NL, TrIQ4_NL, 64)
MT_MMQ_DEFINE(BlockMXFP4, TrMXFP4, 16)
MT_MMQ_DEFINE(BlockMXFP4, TrMXFP4, 32)
MT_MMQ_DEFINE(BlockMXFP4, TrMXFP4, 64)
MT_MMQ_DEFINE(BlockQ4_0, TrQ4_0, 16)
MT_MMQ_DEFINE(BlockQ4_0, TrQ4_0, 32)
MT_MMQ_DEFINE(BlockQ4_0, TrQ4_0, 64)
MT_MMQ_DEFINE(BlockQ5_0, TrQ5_0, 16)
MT_MMQ_DEFINE(BlockQ5_0, TrQ5_0, 32)
MT_MMQ_DEFINE(BlockQ5_0, TrQ5_0, 64)
MT_MMQ_DEFINE(BlockQ8_0, TrQ8_0, 16)
MT_MMQ_DEFINE(BlockQ8_0, TrQ8_0, 32)
MT_MMQ_DEFINE(BlockQ8_0, TrQ8_0, 64)
#undef MT_MMQ_DEFINE

}  // namespace mt::cuda
