// moetier_cuda_tune: the kernel-choice measurement of `moetier tune` (cuda/kernels/tune.h) as a
// standalone benchmark: prints the crossovers, the rates against cuBLAS and the table rows.
#include "cuda/kernels/tune.h"

int main() { return mt::cuda::run_tune({}); }
