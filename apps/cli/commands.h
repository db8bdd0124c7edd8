// The `moetier` subcommands. Each registers its flags on a CLI11 app and returns the
// function that runs it (exit code 0 on success, 1 on a reported error, 2 on bad usage).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace mt::cli {

using Runner = std::function<int()>;

Runner add_synth(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_bench(CLI::App& app);

}  // namespace mt::cli
