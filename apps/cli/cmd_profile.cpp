// moetier profile: feed a set of prompts (one per line) through the model and count how
// often each MoE layer selects each expert: the popularity profile (experts/popularity.h)
// that seeds the static-hot cache policy and the planner's hit-rate predictions.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "apps/cli/commands.h"
#include "apps/cli/common_flags.h"
#include "core/log.h"
#include "experts/popularity.h"
#include "model/model.h"
#include "runtime/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

struct ProfileFlags {
  std::string model, prompts, output;
  int threads = 0;
  uint32_t n_ctx = 0;
  bool chat = false;
};

// Counts every routing decision into the profile: counts[layer][expert].
class CountingTrace : public Trace {
 public:
  CountingTrace(PopularityProfile& p, uint32_t n_expert) : p_(p), n_expert_(n_expert) {}
  void routing(uint32_t layer, uint32_t, std::span<const int32_t> experts, std::span<const float>) override {
    if (p_.counts.size() <= layer) p_.counts.resize(layer + 1);
    if (p_.counts[layer].empty()) p_.counts[layer].assign(n_expert_, 0);
    for (int32_t e : experts) ++p_.counts[layer][static_cast<size_t>(e)];
  }

 private:
  PopularityProfile& p_;
  uint32_t n_expert_;
};

// The non-blank lines of the prompts file, with their line numbers.
StatusOr<std::vector<std::pair<size_t, std::string>>> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open prompts file '" + path + "'");
  std::vector<std::pair<size_t, std::string>> prompts;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.emplace_back(n, line);
  }
  if (in.bad()) return io_error("error reading prompts file '" + path + "'");
  if (prompts.empty()) return invalid_argument("prompts file '" + path + "' has no prompts (one per line)");
  return prompts;
}

void print_summary(const PopularityProfile& p) {
  for (uint32_t l = 0; l < p.counts.size(); ++l) {
    if (p.counts[l].empty()) continue;
    const std::vector<uint32_t> order = p.ranked(l);
    const auto used = std::count_if(p.counts[l].begin(), p.counts[l].end(), [](uint64_t c) { return c > 0; });
    std::fprintf(stderr, "  layer %2u: %ld/%u experts used, top 25%% take %4.1f%%, busiest %u (%.1f%%)\n", l,
                 static_cast<long>(used), p.n_expert, 100.0 * p.coverage(l, std::max(1u, p.n_expert / 4)), order[0],
                 100.0 * p.coverage(l, 1));
  }
}

int run(const ProfileFlags& f) {
  auto prompts = read_prompts(f.prompts);
  if (!prompts.ok()) return fail("profile", prompts.status());
  if (Status st = check_threads(f.threads); !st.ok()) return fail("profile", st);
  auto model = Model::load(f.model, {f.threads, true});
  if (!model.ok()) return fail("profile", model.status());
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  if (!tokenizer.ok()) return fail("profile", tokenizer.status());
  const HParams& hp = (*model)->hparams();
  if (hp.n_expert == 0) return fail("profile", invalid_argument(f.model + " has no experts to profile"));
  std::optional<ChatPrompt> chat;  // the renderer run --chat and serve use
  if (f.chat) {
    auto loaded = ChatPrompt::load((*model)->file(), *tokenizer);
    if (!loaded.ok()) return fail("profile", loaded.status());
    chat = std::move(*loaded);
  }
  const uint32_t n_ctx = f.n_ctx ? f.n_ctx : hp.n_ctx_train;
  std::ofstream out(f.output, std::ios::binary);
  if (!out) return fail("profile", io_error("cannot create '" + f.output + "'"));

  PopularityProfile profile;
  profile.model = std::filesystem::path(f.model).filename().string();
  profile.n_expert = hp.n_expert;
  profile.counts.resize(hp.n_layer);
  CountingTrace counter(profile, hp.n_expert);
  Progress progress("profiling", prompts->size(), true, "prompts");
  std::vector<float> logits;
  for (size_t i = 0; i < prompts->size(); ++i) {
    const auto& [line, text] = (*prompts)[i];
    const std::string where = f.prompts + ":" + std::to_string(line) + ": ";
    std::vector<int32_t> ids;
    if (chat) {
      const std::vector<ChatMessage> messages{{"user", text}};
      auto rendered = chat->render(messages);
      if (!rendered.ok()) return fail("profile", rendered.status());
      ids = tokenizer->encode(*rendered, true, true);
    } else {
      ids = tokenizer->encode(text, true, false);
    }
    if (ids.empty()) return fail("profile", invalid_argument(where + "the prompt tokenizes to nothing"));
    if (ids.size() > n_ctx) {
      return fail("profile", out_of_range(where + std::to_string(ids.size()) + " tokens exceed the context of " +
                               std::to_string(n_ctx) + " (-c/--ctx-size)"));
    }
    auto session = Session::create(**model, static_cast<uint32_t>(ids.size()));
    if (!session.ok()) return fail("profile", session.status());
    Status s = session->feed(ids, false, &logits, &counter);
    if (!s.ok()) return fail("profile", Status(s.code(), where + s.message()));
    profile.tokens += ids.size();
    progress.update(i + 1);
  }
  progress.finish();

  out << popularity_to_json(profile);
  out.close();
  if (!out) return fail("profile", io_error("cannot write '" + f.output + "'"));
  std::fprintf(stderr, "profile: %zu prompts, %llu tokens, %u experts top-%u -> %s\n", prompts->size(),
               static_cast<unsigned long long>(profile.tokens), hp.n_expert, hp.n_expert_used, f.output.c_str());
  print_summary(profile);
  return 0;
}

}  // namespace

Runner add_profile(CLI::App& app) {
  auto f = std::make_shared<ProfileFlags>();
  app.add_option("-m,--model", f->model, "GGUF model")->required();
  app.add_option("--prompts", f->prompts, "text file, one prompt per line (blank lines skipped)")->required();
  app.add_option("-o,--output", f->output, "popularity profile JSON to write")->required();
  app.add_option("-t,--threads", f->threads, "threads (0 = all, the default; more than the hardware threads warns)");
  app.add_option("-c,--ctx-size,--ctx", f->n_ctx, "longest prompt allowed in tokens (default: the training context)");
  app.add_flag("--chat", f->chat, "wrap each prompt in the model's chat format");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
