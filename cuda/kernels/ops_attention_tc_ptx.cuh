// Internal to cuda/kernels/ops_attention_tc.cu: the sm_80+ warp instructions the tensor-core
// attention is built from, each a thin inline-PTX wrapper, and the fragment layouts they
// produce (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and
// "ldmatrix"). With g = lane >> 2 (groupID) and t = lane & 3 (threadID_in_group):
//
//   A (16 x 16 f16, row-major), 4 regs of f16x2, lower column in the low half:
//     a0 = (row g,     cols 2t, 2t+1)    a1 = (row g + 8, cols 2t, 2t+1)
//     a2 = (row g,     cols 2t+8, 2t+9)  a3 = (row g + 8, cols 2t+8, 2t+9)
//   B (16 x 8 f16, "col": element (k, n) at n * ld + k), 2 regs:
//     b0 = (rows k 2t, 2t+1; col n g)    b1 = (rows k 2t+8, 2t+9; col n g)
//   C/D (16 x 8 f32), 4 floats:
//     c0, c1 = (row g, cols 2t, 2t+1)    c2, c3 = (row g + 8, cols 2t, 2t+1)
//
//   ldmatrix.m8n8.x4 (b16): lanes 8i .. 8i+7 give the shared addresses of the 8 rows (16
//   bytes each, 16-byte aligned) of matrix i; register i of every lane receives from
//   matrix i the pair (row g, cols 2t, 2t+1), or with .trans the pair (rows 2t, 2t+1;
//   col g), the lower row in the low half.
//
// Every wrapper must be executed by all 32 lanes of the warp (they are .sync.aligned).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace mt::cuda::detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously (L2 only); valid == false zero-fills the 16
// shared bytes and reads nothing (src must still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d (16 x 8 f32) += a (16 x 16 f16) * b (16 x 8 f16), layouts above.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to nearest even as one f16x2 register, lo in the low half.
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

// The two halves of an f16x2 register, widened (exactly), summed in f32.
__device__ __forceinline__ float half2_sum(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, sizeof(h));
  return __low2float(h) + __high2float(h);
}

}  // namespace mt::cuda::detail
