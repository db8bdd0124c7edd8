// Renders a parsed template (runtime/jinja_parser.h) against a set of global variables.
//
// Scoping is Jinja's: `if` opens no scope; each iteration of a `for` and each macro call
// gets a fresh one, so `{% set %}` inside them is forgotten at their end (a namespace is
// how templates carry state out); macros see the template's top-level variables as they
// are when called. Undefined names evaluate to undefined, which prints as "", is false,
// iterates as empty, and yields undefined again on attribute or index access (more lenient
// than Jinja, which raises on the latter). `a and b` / `a or b` return an operand, as in
// Python. A render is bounded (steps, time, output bytes, data built, macro recursion) so
// that a hostile template ends with an error rather than hanging or exhausting memory.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/jinja_parser.h"
#include "runtime/jinja_value.h"

namespace mt::jinja {

struct RenderLimits {
  uint64_t max_steps = 20'000'000;          // nodes rendered plus loop iterations
  size_t max_output_bytes = size_t{1} << 26;  // of any one rendered body
  int max_call_depth = 200;                 // nested macro calls
  uint64_t max_bytes_made = uint64_t{1} << 30;  // strings and containers built (jinja_value.h)
  double max_seconds = 10;                  // wall time (one step can scan a 64 MiB string)
};

StatusOr<std::string> render_template(const std::vector<Node>& nodes, const Dict& globals,
                                      const RenderLimits& limits = {});

}  // namespace mt::jinja
