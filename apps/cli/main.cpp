// moetier <command> [flags]: the command-line entry point.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "apps/cli/commands.h"
#include "core/status.h"

namespace mt::cli {

int fail(const char* command, const Status& s) {
  std::fprintf(stderr, "moetier %s: %s\n", command, s.to_string().c_str());
  return 1;
}

}  // namespace mt::cli

int main(int argc, char** argv) {
  CLI::App app{"moetier: MoE inference with experts tiered between GPU, host memory and CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moetier 0.1.0");
  std::map<CLI::App*, mt::cli::Runner> runners;
  auto add = [&](const char* name, const char* help, mt::cli::Runner (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = make(*sub);
  };
  add("synth", "write a synthetic GGUF of a real MoE architecture and checkpoint geometry", mt::cli::add_synth);
  add("inspect", "print a GGUF's metadata, tensors and per-layer expert geometry", mt::cli::add_inspect);
  add("run", "generate text from a prompt (default: the embedded demo model)", mt::cli::add_run);
  add("logits", "raw float32 logits at every position and the routing, for given token ids", mt::cli::add_logits);
  add("info", "print the build's features (CPU, CUDA)", mt::cli::add_info);
  add("bench", "prompt and generation throughput, llama-bench style (pp and tg tests)", mt::cli::add_bench);
  add("plan", "where the weights, KV cache and experts go, and the predicted decode speed per mode", mt::cli::add_plan);
  add("hwprofile", "measure this machine's memory, CPU expert and GPU copy speeds (JSON)", mt::cli::add_hwprofile);
  add("profile", "count each layer's expert selections over a prompt set (popularity profile)", mt::cli::add_profile);
  add("simulate", "replay a routing record through the expert cache: hit rates, traffic, predicted speed",
      mt::cli::add_simulate);
  add("analyze-routing", "granule trade curve of a routing record: waste, resident and transfer MiB",
      mt::cli::add_analyze_routing);
  add("tune", "measure the GPU's mmvq / mmq / gemm crossovers and write the kernel-choice table", mt::cli::add_tune);
#ifdef MOETIER_HAVE_SERVER
  add("serve", "OpenAI-compatible HTTP server: chat and text completions, streamed, batched", mt::cli::add_serve);
#endif
  // llama.cpp's single-dash `-ngl N` (CLI11 takes one-letter short options only).
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a == "-ngl" || a.rfind("-ngl=", 0) == 0) a.insert(0, "-");
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (CLI::App* sub : app.get_subcommands()) return runners.at(sub)();
  return 2;
}
