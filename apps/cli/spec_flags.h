// The speculative-decoding flags of run and bench (runtime/speculative.h): which drafter
// (a draft model, prompt lookup, the model's NextN block, or the labelled acceptance mode), the draft length, and
// the set-up that turns them into a Drafter next to the target's engine.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "apps/cli/engine.h"
#include "core/status.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {

struct SpecFlags {
  std::string draft_model;  // --draft-model FILE
  int lookup = 0;           // --lookup N: prompt lookup with n-grams of up to N tokens
  double scripted = -1;     // --draft-scripted P: the labelled acceptance mode
  bool mtp = false;         // --mtp: the model's own NextN block
  int draft_max = 8, draft_min = 1;
  bool draft_fixed = false;  // --draft-fixed: always ask for draft_max
  bool any() const { return !draft_model.empty() || lookup > 0 || scripted >= 0 || mtp; }
};

void add_spec_flags(CLI::App& app, SpecFlags* f);

struct SpecSetup {
  std::unique_ptr<Engine> draft_engine;  // --draft-model's
  std::unique_ptr<Drafter> drafter;
  SpecConfig config;
};

// What the target needs to build a drafter: its engine and tokenizer, the prompt, and for
// the labelled mode the length and sampling of the plain greedy reference it decodes first.
struct SpecTarget {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const std::vector<int32_t>* prompt = nullptr;
  int n_predict = 0;
  uint32_t n_ctx = 0;
  SamplingParams sampling;
  int threads = 0;
  DeviceFlags device;
  Trace* trace = nullptr;  // the labelled mode's reference decode sees it (bench --routing: the replayed routing)
  bool hold_script = false;  // the labelled mode holds the output to its script (bench; ScriptedDrafter)
};

// Errors (one line each): more than one drafter, a bad length or probability, a draft
// model of another vocabulary, the labelled mode above temperature 0, a Gated DeltaNet
// draft model (it cannot go back over its own guesses yet).
StatusOr<SpecSetup> make_spec(const SpecFlags& f, const SpecTarget& target);

// "speculative: <drafter>: 40 steps, 120 drafted, 90 accepted (75.0%), 3.25 tokens per step"
std::string spec_summary(const Drafter& drafter, const SpecStats& stats);

}  // namespace mt::cli
