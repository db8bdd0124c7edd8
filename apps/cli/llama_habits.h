// llama.cpp's flags typed by habit at moetier's command line, and the words around the
// subcommand. Before CLI11 parses argv (it takes one-letter short options only, so
// `-no-cnv` would read as `-n o-cnv`), each llama.cpp flag is
//   translated to the moetier flag that means the same here (-ngl -> --ngl, -ctk/-ctv ->
//     --kv-type, -ncmoe -> --n-cpu-moe, -sys -> --system, -np -> serve's --max-running),
//   dropped where it asks for what moetier always does (-fa: attention is always one fused
//     pass; -no-cnv: run is one turn; --jinja: templates are always Jinja), with a note
//     when the value asks for the opposite (-fa off), or
//   refused with a pointer to the moetier way (-b, --no-mmap, -ot, -ts, -hf, -cnv, ...).
// Any other single-dash word of two or more letters is refused too, rather than read as a
// one-letter flag with a glued value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mt::cli {

struct Habits {
  std::vector<std::string> args;   // argv for CLI11
  std::vector<std::string> notes;  // warnings to print (e.g. "-fa off: ...")
};

// args[0] is the program; command is the subcommand's name ("" when none was found).
StatusOr<Habits> translate_llama_habits(std::vector<std::string> args, std::string_view command);

// Levenshtein distance (the nearest-subcommand suggestion).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace mt::cli
