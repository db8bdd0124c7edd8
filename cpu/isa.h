// Run-time CPU feature levels and the choice among them.
//
// One binary carries a scalar, an AVX2 (+FMA, F16C) and an AVX-512 (F, BW, VL, with VNNI
// where present) build of every kernel, each in its own translation unit compiled with
// that level's flags; the level is picked once, at first use, from CPUID, and can be
// lowered (never raised) with MOETIER_CPU_ISA=scalar|avx2|avx512|avx512vnni for tests.
#pragma once

#include <optional>
#include <string_view>

namespace mt::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };

const char* isa_name(Isa isa);
// The best level this CPU supports.
Isa detect_hardware_isa();
// The level in use: the hardware's, lowered by MOETIER_CPU_ISA if set (read once).
Isa active_isa();

// "scalar", "avx2", "avx512", "avx512vnni" (any case) -> the level; nullopt if unknown.
std::optional<Isa> isa_from_name(std::string_view name);
// The level a MOETIER_CPU_ISA value selects on `hardware` (pure; active_isa applies it and
// warns once when the name is unknown or above the hardware): unset (null), empty or
// unknown gives `hardware`; a known name gives the lower of it and `hardware`.
Isa parse_isa_override(const char* value, Isa hardware);

}  // namespace mt::cpu
