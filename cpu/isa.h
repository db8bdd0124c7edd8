// Run-time CPU feature levels and the choice among them.
//
// One binary carries a scalar, an AVX2 (+FMA, F16C) and an AVX-512 (F, BW, VL, with VNNI
// where present) build of every kernel, each in its own translation unit compiled with
// that level's flags; the level is picked once, at first use, from CPUID, and can be
// lowered (never raised) with MOETIER_CPU_ISA=scalar|avx2|avx512|avx512vnni for tests.
#pragma once

namespace mt::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };

const char* isa_name(Isa isa);
// The best level this CPU supports.
Isa detect_hardware_isa();
// The level in use: the hardware's, lowered by MOETIER_CPU_ISA if set (read once).
Isa active_isa();

}  // namespace mt::cpu
