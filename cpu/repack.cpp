#include "cpu/repack.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "quant/reference.h"

namespace mt::cpu {
namespace {

void interleave_q4_k(const uint8_t* src, size_t row_bytes, int64_t nb, uint8_t* dst) {
  auto* out = reinterpret_cast<BlockQ4_Kx8*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ4_Kx8& o = out[i];
    for (int m = 0; m < kInterleave; ++m) {
      BlockQ4_K b;
      std::memcpy(&b, src + m * row_bytes + i * sizeof(BlockQ4_K), sizeof(b));
      o.d[m] = b.d;
      o.dmin[m] = b.dmin;
      for (int w = 0; w < 3; ++w) std::memcpy(&o.scales[w][m], b.scales + 4 * w, 4);
      for (int c = 0; c < 4; ++c) {
        for (int s = 0; s < 4; ++s) std::memcpy(o.qs[c][s][m], b.qs + 32 * c + 8 * s, 8);
      }
    }
  }
}

BlockQ4_K row_of_q4_k(const BlockQ4_Kx8& g, int m) {
  BlockQ4_K b;
  b.d = g.d[m];
  b.dmin = g.dmin[m];
  for (int w = 0; w < 3; ++w) std::memcpy(b.scales + 4 * w, &g.scales[w][m], 4);
  for (int c = 0; c < 4; ++c) {
    for (int s = 0; s < 4; ++s) std::memcpy(b.qs + 32 * c + 8 * s, g.qs[c][s][m], 8);
  }
  return b;
}

void interleave_q6_k(const uint8_t* src, size_t row_bytes, int64_t nb, uint8_t* dst) {
  auto* out = reinterpret_cast<BlockQ6_Kx8*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ6_Kx8& o = out[i];
    for (int m = 0; m < kInterleave; ++m) {
      BlockQ6_K b;
      std::memcpy(&b, src + m * row_bytes + i * sizeof(BlockQ6_K), sizeof(b));
      o.d[m] = b.d;
      for (int j = 0; j < 16; ++j) o.scales[j / 2][m][j % 2] = b.scales[j];
      for (int n = 0; n < 2; ++n) {
        for (int s = 0; s < 4; ++s) {
          for (int h = 0; h < 2; ++h) std::memcpy(o.q[n][s][h][m], b.ql + 64 * n + 32 * h + 8 * s, 8);
          std::memcpy(o.q[n][s][2][m], b.qh + 32 * n + 8 * s, 8);
        }
      }
    }
  }
}

BlockQ6_K row_of_q6_k(const BlockQ6_Kx8& g, int m) {
  BlockQ6_K b;
  b.d = g.d[m];
  for (int j = 0; j < 16; ++j) b.scales[j] = g.scales[j / 2][m][j % 2];
  for (int n = 0; n < 2; ++n) {
    for (int s = 0; s < 4; ++s) {
      for (int h = 0; h < 2; ++h) std::memcpy(b.ql + 64 * n + 32 * h + 8 * s, g.q[n][s][h][m], 8);
      std::memcpy(b.qh + 32 * n + 8 * s, g.q[n][s][2][m], 8);
    }
  }
  return b;
}

// Row m of a group, super-blocks [0, nb), rebuilt in the GGUF layout.
template <typename Group, typename Block, Block (*kRowOf)(const Group&, int)>
void rebuild_row(const uint8_t* group, int64_t nb, int m, std::vector<uint8_t>& out) {
  out.resize(static_cast<size_t>(nb) * sizeof(Block));
  const auto* blocks = reinterpret_cast<const Group*>(group);
  for (int64_t i = 0; i < nb; ++i) {
    const Block b = kRowOf(blocks[i], m);
    std::memcpy(out.data() + i * sizeof(Block), &b, sizeof(b));
  }
}

}  // namespace

bool has_interleaved_layout(QuantType type) { return type == QuantType::Q4_K || type == QuantType::Q6_K; }

void interleave_rows(QuantType type, const uint8_t* src, size_t row_bytes, int64_t n_in, int64_t n_rows, uint8_t* dst) {
  MT_CHECK(has_interleaved_layout(type) && n_rows % kInterleave == 0 && n_in % kQKK == 0);
  MT_CHECK(row_bytes == *mt::row_bytes(type, static_cast<uint64_t>(n_in)));
  for (int64_t g = 0; g < n_rows / kInterleave; ++g) {
    const size_t offset = static_cast<size_t>(g) * kInterleave * row_bytes;
    if (type == QuantType::Q4_K) {
      interleave_q4_k(src + offset, row_bytes, n_in / kQKK, dst + offset);
    } else {
      interleave_q6_k(src + offset, row_bytes, n_in / kQKK, dst + offset);
    }
  }
}

void gemm_x8_reference(QuantType type, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                       size_t act_stride, int64_t n_tok, float* y, int64_t y_stride) {
  MT_CHECK(has_interleaved_layout(type) && n_rows % kInterleave == 0 && n % kQKK == 0);
  const VecDotFn dot = kernels_for(Isa::kScalar).vec_dot[static_cast<int>(type)];
  const int64_t nb = n / kQKK;
  std::vector<uint8_t> row;
  for (int64_t g = 0; g < n_rows / kInterleave; ++g) {
    const uint8_t* group = static_cast<const uint8_t*>(w) + g * w_stride;
    for (int m = 0; m < kInterleave; ++m) {
      if (type == QuantType::Q4_K) {
        rebuild_row<BlockQ4_Kx8, BlockQ4_K, row_of_q4_k>(group, nb, m, row);
      } else {
        rebuild_row<BlockQ6_Kx8, BlockQ6_K, row_of_q6_k>(group, nb, m, row);
      }
      for (int64_t t = 0; t < n_tok; ++t) {
        y[t * y_stride + g * kInterleave + m] = dot(n, row.data(), static_cast<const uint8_t*>(act) + t * act_stride);
      }
    }
  }
}

}  // namespace mt::cpu
