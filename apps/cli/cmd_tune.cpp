// moetier tune: measure, on this machine's GPU, which product kernel (mmvq, mmq, gemm)
// is fastest at which token count for dense and routed products, and print (or write
// with -o) the rows of the per-architecture threshold table cuda/dispatch_sm<NN>.inc
// (cuda/kernels/tune.h). A build without CUDA, or no device, is a clear error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "apps/cli/commands.h"
#ifdef MOETIER_HAVE_CUDA
#include "cuda/host_memory.h"
#include "cuda/kernels/tune.h"
#endif

namespace mt::cli {
namespace {

struct TuneFlags {
  std::string output;            // empty: print only
  std::string dense_mmq = "always";
};

int run(const TuneFlags& f) {
  if (f.dense_mmq != "always" && f.dense_mmq != "measured") {
    std::fprintf(stderr, "moetier tune: --dense-mmq must be 'always' or 'measured'\n");
    return 1;
  }
#ifdef MOETIER_HAVE_CUDA
  auto mem = cuda::device_memory(0);
  if (!mem.ok()) {
    std::fprintf(stderr, "moetier tune: %s\n", mem.status().to_string().c_str());
    return 1;
  }
  cuda::TuneOptions options;
  options.inc_path = f.output;
  options.dense_mmq_always = f.dense_mmq == "always";
  return cuda::run_tune(options);
#else
  (void)f;
  std::fprintf(stderr, "moetier tune: this build has no CUDA backend (nothing to tune)\n");
  return 1;
#endif
}

}  // namespace

Runner add_tune(CLI::App& app) {
  auto f = std::make_shared<TuneFlags>();
  app.add_option("-o,--output", f->output, "write the table rows here (e.g. cuda/kernels/dispatch_sm90.inc)");
  app.add_option("--dense-mmq", f->dense_mmq,
                 "dense products above mmvq: 'always' mmq (the CPU's integer numerics; default) or the 'measured' "
                 "mmq/gemm crossover");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
