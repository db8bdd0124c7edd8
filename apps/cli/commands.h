// The `moetier` subcommands. Each registers its flags on a CLI11 app and returns the
// function that runs it (exit code 0 on success, 1 on a reported error, 2 on bad usage).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>

namespace CLI {
class App;
}
namespace mt {
class Status;
}

namespace mt::cli {

using Runner = std::function<int()>;

Runner add_synth(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_hwprofile(CLI::App& app);
Runner add_profile(CLI::App& app);
Runner add_simulate(CLI::App& app);
Runner add_analyze_routing(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_tune(CLI::App& app);
Runner add_slice(CLI::App& app);

// A subcommand's reported error: "moetier <command>: <status>" on stderr; returns 1.
int fail(const char* command, const Status& s);

// One routing decision as a JSON line, the format of `logits --routing` and
// `run --record-routing` (experts/routing_trace.h reads it):
// {"layer": L, "pos": P, "step": S, "experts": [...], "weights": [...]}, S numbering the
// forward calls (the prompt batch, then one per decoded token).
void write_routing_line(FILE* f, uint32_t layer, uint32_t pos, uint64_t step, std::span<const int32_t> experts,
                        std::span<const float> weights);

}  // namespace mt::cli
