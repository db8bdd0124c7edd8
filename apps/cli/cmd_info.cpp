// moetier info: what this build can use (CPU features, CUDA devices).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/cli/commands.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/kernels/device.h"
#endif

namespace mt::cli {

Runner add_info(CLI::App&) {
  return [] {
    std::printf("moetier 0.1.0\n");
    __builtin_cpu_init();
    std::printf("cpu: avx2 %s, avx512f %s, avx512bw %s, avx512vnni %s, avxvnni %s\n",
                __builtin_cpu_supports("avx2") ? "yes" : "no", __builtin_cpu_supports("avx512f") ? "yes" : "no",
                __builtin_cpu_supports("avx512bw") ? "yes" : "no",
                __builtin_cpu_supports("avx512vnni") ? "yes" : "no", __builtin_cpu_supports("avxvnni") ? "yes" : "no");
#ifdef MOETIER_HAVE_CUDA
    std::printf("cuda: %s\n", mt::cuda::describe_devices().c_str());
#else
    std::printf("cuda: not built\n");
#endif
    return 0;
  };
}

}  // namespace mt::cli
