#include "apps/cli/spec_flags.h"

#include <cstdio>

#include "backend/backend.h"
#include "model/model.h"

namespace mt::cli {

void add_spec_flags(CLI::App& app, SpecFlags* f) {
  app.add_option("--draft-model", f->draft_model,
                 "speculative decoding with a draft model: a smaller GGUF of the same vocabulary, decoding greedily");
  app.add_option("--lookup", f->lookup,
                 "speculative decoding by prompt lookup: the tokens that followed the last earlier occurrence of the "
                 "text's last N (down to 1) tokens are the draft; no extra model");
  app.add_option("--draft-scripted", f->scripted,
                 "LABELLED measurement mode: the draft is the target's own greedy continuation (decoded first), each "
                 "token kept with probability P in [0, 1], else a wrong one; needs --temp 0");
  app.add_flag("--mtp", f->mtp,
               "speculative decoding with the model's own NextN (MTP) block (glm4moe, deepseek2, qwen35moe / qwen3next "
               "files that carry one): no extra model; CPU");
  app.add_option("--draft-max", f->draft_max, "longest draft (default 8)");
  app.add_option("--draft-min", f->draft_min, "shortest draft the adaptive length shrinks to (default 1)");
  app.add_flag("--draft-fixed", f->draft_fixed, "always draft --draft-max tokens (default: adaptive)");
}

namespace {

// The plain greedy continuation of the prompt: the labelled mode's script.
StatusOr<std::vector<int32_t>> greedy_reference(const SpecTarget& t) {
  MT_ASSIGN_OR_RETURN(Sequence seq, Sequence::create(t.engine->backend(), t.n_ctx));
  Sampler sampler(t.sampling, t.engine->backend().n_vocab());
  for (int32_t id : *t.prompt) sampler.accept(id);
  std::vector<int32_t> reference = *t.prompt;
  std::vector<float> logits;
  MT_RETURN_IF_ERROR(seq.feed(*t.prompt, false, &logits, t.trace));
  for (int i = 0; i < t.n_predict; ++i) {
    const int32_t next = sampler.sample(logits);
    sampler.accept(next);
    reference.push_back(next);
    if (i + 1 < t.n_predict) MT_RETURN_IF_ERROR(seq.feed({&next, 1}, false, &logits, t.trace));
  }
  return reference;
}

}  // namespace

StatusOr<SpecSetup> make_spec(const SpecFlags& f, const SpecTarget& t) {
  const int kinds = !f.draft_model.empty() + (f.lookup > 0) + (f.scripted >= 0) + f.mtp;
  if (kinds > 1) return invalid_argument("give one drafter: --draft-model, --lookup, --mtp or --draft-scripted");
  if (f.lookup < 0) return invalid_argument("--lookup must be >= 1 (the longest n-gram looked up)");
  if (f.scripted >= 0 && f.scripted > 1) return invalid_argument("--draft-scripted takes a probability in [0, 1]");
  if (f.draft_max < 1 || f.draft_max > 64) return invalid_argument("--draft-max must be in [1, 64]");
  if (f.draft_min < 0 || f.draft_min > f.draft_max) return invalid_argument("--draft-min must be in [0, --draft-max]");

  SpecSetup setup;
  setup.config.draft_max = f.draft_max;
  setup.config.draft_min = f.draft_min;
  setup.config.adaptive = !f.draft_fixed;
  const uint32_t n_vocab = t.engine->backend().n_vocab();
  if (f.mtp) {
    if (t.engine->on_gpu()) {
      return unimplemented("--mtp on --device cuda: the NextN (MTP) block runs on the CPU backend only for now");
    }
    MT_RETURN_IF_ERROR(t.engine->model().nextn_status());
    setup.drafter = std::make_unique<NextnDrafter>();
  } else if (f.lookup > 0) {
    setup.drafter = std::make_unique<LookupDrafter>(f.lookup, 1);
  } else if (f.scripted >= 0) {
    if (t.sampling.temperature != 0) {
      return invalid_argument("--draft-scripted proposes the greedy continuation: give --temp 0");
    }
    MT_ASSIGN_OR_RETURN(std::vector<int32_t> reference, greedy_reference(t));
    setup.drafter = std::make_unique<ScriptedDrafter>(std::move(reference), f.scripted, n_vocab,
                                                      t.sampling.seed != 0 ? t.sampling.seed : 1, t.hold_script);
  } else if (!f.draft_model.empty()) {
    MT_ASSIGN_OR_RETURN(setup.draft_engine, Engine::load(f.draft_model, t.threads, true, t.device));
    const Model& draft = setup.draft_engine->model();
    const HParams& dhp = draft.hparams();
    for (uint32_t l = 0; l < dhp.n_layer; ++l) {
      if (dhp.is_recurrent(l)) return unimplemented("--draft-model: a Gated DeltaNet draft cannot roll back its guesses yet");
    }
    MT_ASSIGN_OR_RETURN(Tokenizer draft_tokens, Tokenizer::from_gguf(draft.file()));
    if (draft_tokens.n_vocab() != t.tokenizer->n_vocab()) {
      return invalid_argument("--draft-model '" + f.draft_model + "' has " + std::to_string(draft_tokens.n_vocab()) +
                              " tokens, the model " + std::to_string(t.tokenizer->n_vocab()) + ": a draft needs the same vocabulary");
    }
    for (uint32_t id = 0; id < draft_tokens.n_vocab(); ++id) {
      if (draft_tokens.token_text(static_cast<int32_t>(id)) != t.tokenizer->token_text(static_cast<int32_t>(id))) {
        return invalid_argument("--draft-model '" + f.draft_model + "': token " + std::to_string(id) + " is '" +
                                draft_tokens.token_text(static_cast<int32_t>(id)) + "' there and '" +
                                t.tokenizer->token_text(static_cast<int32_t>(id)) + "' in the model: a draft needs the same vocabulary");
      }
    }
    MT_ASSIGN_OR_RETURN(setup.drafter, ModelDrafter::create(setup.draft_engine->backend(), t.n_ctx, f.draft_model));
  }
  return setup;
}

std::string spec_summary(const Drafter& drafter, const SpecStats& s) {
  char text[256];
  std::snprintf(text, sizeof(text), "%llu steps, %llu drafted, %llu accepted (%.1f%%), %.2f tokens per step",
                static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(s.drafted),
                static_cast<unsigned long long>(s.accepted), 100.0 * s.acceptance(), s.tokens_per_step());
  std::string line = "speculative: " + drafter.describe() + ": " + text;
  if (s.backed_off > 0) line += ", " + std::to_string(s.backed_off) + " plain steps while drafting did not pay";
  if (s.held > 0) line += ", " + std::to_string(s.held) + " picks held to the script (near ties)";
  return line;
}

}  // namespace mt::cli
