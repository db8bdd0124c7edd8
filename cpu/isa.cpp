#include "cpu/isa.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "core/log.h"

namespace mt::cpu {
namespace {

constexpr const char* kNames[] = {"scalar", "avx2", "avx512", "avx512vnni"};

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const char* isa_name(Isa isa) { return kNames[static_cast<int>(isa)]; }

Isa detect_hardware_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the YMM / ZMM state (XGETBV).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return Isa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  if (!avx512) return Isa::kAvx2;
  return __builtin_cpu_supports("avx512vnni") ? Isa::kAvx512Vnni : Isa::kAvx512;
#else
  return Isa::kScalar;
#endif
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (equal_ignoring_case(name, kNames[i])) return static_cast<Isa>(i);
  }
  return std::nullopt;
}

Isa parse_isa_override(const char* value, Isa hardware) {
  if (value == nullptr || *value == '\0') return hardware;
  const std::optional<Isa> requested = isa_from_name(value);
  if (!requested) return hardware;
  return *requested < hardware ? *requested : hardware;
}

Isa active_isa() {
  static const Isa isa = [] {
    const Isa hardware = detect_hardware_isa();
    const char* value = std::getenv("MOETIER_CPU_ISA");
    const Isa chosen = parse_isa_override(value, hardware);
    if (value != nullptr && *value != '\0') {
      const std::optional<Isa> requested = isa_from_name(value);
      if (!requested) {
        log_warn(std::string("MOETIER_CPU_ISA=") + value +
                 " is not one of scalar|avx2|avx512|avx512vnni; using " + isa_name(chosen));
      } else if (*requested > hardware) {
        log_warn(std::string("MOETIER_CPU_ISA=") + value + " is above what this CPU supports; using " +
                 isa_name(chosen));
      }
    }
    return chosen;
  }();
  return isa;
}

}  // namespace mt::cpu
