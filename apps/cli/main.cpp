// moetier <command> [flags]: the command-line entry point. Every error is one line on
// stderr and exit 1 (the command failed) or 2 (bad usage); an allocation failure is caught
// here and reported the same way, never an abort.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/cli/commands.h"
#include "apps/cli/llama_habits.h"
#include "core/log.h"
#include "core/status.h"

namespace mt::cli {

int fail(const char* command, const Status& s) {
  std::fprintf(stderr, "moetier %s: %s\n", command, s.to_string().c_str());
  return 1;
}

namespace {

// Bad usage: "moetier <command>: <message>", exit 2.
int usage(const std::string& command, std::string message) {
  for (char& c : message) c = c == '\n' ? ' ' : c;
  while (!message.empty() && message.back() == ' ') message.pop_back();
  std::fprintf(stderr, "moetier%s%s: %s\n", command.empty() ? "" : " ", command.c_str(), message.c_str());
  return 2;
}

// --verbose / --quiet (and -v / -q) anywhere on the line set the log level; removed
// before CLI11 sees the subcommand's flags.
std::vector<std::string> take_log_flags(std::vector<std::string> args) {
  std::vector<std::string> rest;
  for (std::string& a : args) {
    if (a == "--verbose" || a == "-v") {
      set_log_level(LogLevel::kDebug);
    } else if (a == "--quiet" || a == "-q") {
      set_log_level(LogLevel::kError);
    } else {
      rest.push_back(std::move(a));
    }
  }
  return rest;
}

// The subcommand named by args (the first word not starting with '-'), or an error that
// suggests the nearest one.
StatusOr<std::string> find_command(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.empty() || a[0] == '-') {
      if (a == "--help" || a == "-h" || a == "--version") return std::string();
      return invalid_argument("'" + a + "' before the command; give the command first (" + list + ")");
    }
    if (std::find(names.begin(), names.end(), a) != names.end()) return a;
    std::string best;
    size_t best_d = ~size_t{0};
    for (const std::string& n : names) {
      const size_t d = edit_distance(a, n);
      if (d < best_d) best_d = d, best = n;
    }
    if (best_d <= std::max<size_t>(2, a.size() / 3)) {
      return invalid_argument("unknown command '" + a + "'; did you mean '" + best + "'?");
    }
    return invalid_argument("unknown command '" + a + "' (commands: " + list + ")");
  }
  return invalid_argument("a command is required: " + list + " (moetier --help)");
}

}  // namespace
}  // namespace mt::cli

int main(int argc, char** argv) {
  CLI::App app{"moetier: MoE inference with experts tiered between GPU, host memory and CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moetier 0.1.0");
  bool verbose = false, quiet = false;  // read by take_log_flags before parsing; listed here for --help
  app.add_flag("-v,--verbose", verbose, "more detail on stderr (debug messages); any position");
  app.add_flag("-q,--quiet", quiet, "errors only on stderr (no warnings, progress or run's timings); any position");
  std::map<CLI::App*, mt::cli::Runner> runners;
  auto add = [&](const char* name, const char* help, mt::cli::Runner (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = make(*sub);
  };
  add("synth", "write a synthetic GGUF of a real MoE architecture and checkpoint geometry", mt::cli::add_synth);
  add("inspect", "print a GGUF's metadata, tensors and per-layer expert geometry", mt::cli::add_inspect);
  add("slice", "write a GGUF of a model's first N blocks (an early-exit draft for --draft-model)", mt::cli::add_slice);
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
  std::vector<std::string> args = mt::cli::take_log_flags({argv, argv + argc});
  auto command = mt::cli::find_command(app, args);
  if (!command.ok()) return mt::cli::usage("", command.status().message());
  auto habits = mt::cli::translate_llama_habits(std::move(args), *command);
  if (!habits.ok()) return mt::cli::usage(*command, habits.status().message());
  for (const std::string& note : habits->notes) mt::log_warn(note);
  std::vector<char*> cargs;
  for (std::string& a : habits->args) cargs.push_back(a.data());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return mt::cli::usage(*command, std::string(e.what()) + " (moetier " + *command + " --help)");
  }
  for (CLI::App* sub : app.get_subcommands()) {
    try {
      return runners.at(sub)();
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "moetier %s: out of memory (an allocation failed; a smaller -c, model or --expert-cache?)\n",
                   command->c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moetier %s: %s\n", command->c_str(), e.what());
      return 1;
    }
  }
  return 2;
}
