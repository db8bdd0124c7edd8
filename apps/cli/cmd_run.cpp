// moetier run: generate text from a prompt, streamed as it is produced, then timings and
// an expert-usage summary. Without -m it runs the embedded demo model (models/).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <numeric>

#include "apps/cli/commands.h"
#include "apps/cli/common_flags.h"
#include "apps/cli/engine.h"
#include "apps/cli/sizes.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/tiering_flags.h"
#include "core/log.h"
#include "experts/stats.h"
#include "model/model.h"
#include "runtime/chat_prompt.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

struct RunFlags {
  std::string model, prompt = "In the beginning", system, kv_type = "f16";
  std::vector<std::string> stops;
  int n_predict = 64, threads = 0;
  bool no_interleave = false;
  std::string record_routing, stats_json;
  std::string routing;      // --routing synth:...|trace:FILE (experts/routing_replay.h)
  std::string prompt_file;  // -f: the prompt from a file
  bool escape = false;      // -e: \n, \t, \\, \" ... in the prompt
  BankFlags banks;
  bool stats = false;
  TieringFlags tiering;
  DeviceFlags device;
  uint32_t n_ctx = 0;
  bool chat = false;
  std::string chat_template_file;  // implies chat
  SamplingParams sampling;
  SpecFlags spec;  // --draft-model, --lookup, --draft-scripted
};

// Counts how often each expert of each MoE layer is selected and, with a record file,
// writes every decision as a JSON line (the format of `logits --routing`). With a replay
// (--routing), the MoE layers compute its experts, and those are what it counts and records.
class UsageTrace : public Trace {
 public:
  explicit UsageTrace(FILE* record, RoutingReplay* replay = nullptr) : record_(record), replay_(replay) {}
  void begin_step() override { ++steps_; }
  RoutingReplay* routing_override() override { return replay_; }
  void routing(uint32_t layer, uint32_t pos, std::span<const int32_t> experts, std::span<const float> weights) override {
    if (record_ != nullptr) write_routing_line(record_, layer, pos, steps_ - 1, experts, weights);
    if (counts_.size() <= layer) counts_.resize(layer + 1);
    for (int32_t e : experts) {
      if (counts_[layer].size() <= static_cast<size_t>(e)) counts_[layer].resize(static_cast<size_t>(e) + 1, 0);
      ++counts_[layer][static_cast<size_t>(e)];
    }
    ++selections_;
    experts_selected_ += experts.size();
  }
  void print(uint32_t n_expert, uint64_t n_tokens) const {
    uint32_t moe_layers = 0;
    for (const auto& c : counts_) moe_layers += !c.empty();
    if (moe_layers == 0 || n_tokens == 0) return;
    std::fprintf(stderr, "experts: %.1f computed per token (%u MoE layers x top-%llu)\n",
                 static_cast<double>(experts_selected_) / static_cast<double>(n_tokens), moe_layers,
                 static_cast<unsigned long long>(experts_selected_ / std::max<uint64_t>(1, selections_)));
    for (size_t l = 0; l < counts_.size(); ++l) {
      if (counts_[l].empty()) continue;
      std::vector<uint64_t> c = counts_[l];
      c.resize(n_expert, 0);
      const uint64_t total = std::max<uint64_t>(1, std::accumulate(c.begin(), c.end(), uint64_t{0}));
      const auto used = std::count_if(c.begin(), c.end(), [](uint64_t v) { return v > 0; });
      std::vector<uint32_t> order(n_expert);
      std::iota(order.begin(), order.end(), 0u);
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return c[a] > c[b]; });
      uint64_t top_quarter = 0;
      for (uint32_t i = 0; i < std::max(1u, n_expert / 4); ++i) top_quarter += c[order[i]];
      std::fprintf(stderr, "  layer %2zu: %ld/%u experts used, top 25%% take %4.1f%%, busiest %u (%.1f%%)\n", l,
                   static_cast<long>(used), n_expert, 100.0 * static_cast<double>(top_quarter) / static_cast<double>(total),
                   order[0], 100.0 * static_cast<double>(c[order[0]]) / static_cast<double>(total));
    }
  }

 private:
  FILE* record_;
  RoutingReplay* replay_;
  std::vector<std::vector<uint64_t>> counts_;
  uint64_t selections_ = 0, experts_selected_ = 0, steps_ = 0;
};

std::string default_model() {
  // Next to the source tree this binary was built from, or ./models.
  for (const std::string& dir : {std::string(MOETIER_SOURCE_DIR) + "/models", std::string("models")}) {
    const std::string p = dir + "/kjv-moe-f16.gguf";
    if (std::filesystem::exists(p)) return p;
  }
  return std::string(MOETIER_SOURCE_DIR) + "/models/kjv-moe-f16.gguf";
}

// The prompt's tokens: the text as given, or wrapped in the model's chat format (--chat).
StatusOr<std::vector<int32_t>> encode_prompt(const RunFlags& f, const Model& model, const Tokenizer& tokenizer) {
  std::string text = f.prompt;
  bool parse_special = false;
  if (f.chat || !f.chat_template_file.empty()) {  // the renderer `serve` uses (runtime/chat_prompt.h)
    MT_ASSIGN_OR_RETURN(ChatPrompt chat, ChatPrompt::load(model.file(), tokenizer, f.chat_template_file));
    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back({"system", f.system});
    messages.push_back({"user", f.prompt});
    MT_ASSIGN_OR_RETURN(text, chat.render(messages));
    parse_special = true;
  }
  std::vector<int32_t> prompt = tokenizer.encode(text, true, parse_special);
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  return prompt;
}

// The first kSteadyAfter generated tokens apart from the rest: a cold cache, pinning still
// running or page faults show there (issue 28 asks them within 20% of the rest).
constexpr int kSteadyAfter = 64;

struct RunReport {
  double load_s = 0, prompt_s = 0, gen_s = 0;
  double first_token_s = 0;  // from the start of the load to the first token shown
  double head_s = 0;         // generation time of the first kSteadyAfter tokens (0: fewer)
  std::string spec;  // spec_summary's line, with a drafter
  size_t n_prompt = 0;
  int generated = 0;
  const char* reason = "";
  uint64_t seed = 0;
};

// The timings and the expert-usage summary, on stderr after the text.
void print_report(const RunFlags& f, const Engine& engine, const RunReport& r, const UsageTrace* usage) {
  const HParams& hp = engine.model().hparams();
  std::fprintf(stderr, "\nmodel: %s (%s, %u layers, %u experts top-%u) on %s, load %.2f s, seed %llu, stop: %s\n",
               f.model.c_str(), std::string(arch_info(hp.arch).name).c_str(), hp.n_layer, hp.n_expert, hp.n_expert_used,
               engine.describe().c_str(), r.load_s, static_cast<unsigned long long>(r.seed), r.reason);
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s)\n", r.n_prompt, r.prompt_s,
               static_cast<double>(r.n_prompt) / std::max(r.prompt_s, 1e-9));
  std::fprintf(stderr, "generation: %d tokens in %.3f s (%.1f tok/s); first token %.2f s after the load began\n",
               r.generated, r.gen_s, static_cast<double>(r.generated) / std::max(r.gen_s, 1e-9), r.first_token_s);
  if (r.head_s > 0 && r.generated > kSteadyAfter) {
    const double head = kSteadyAfter / r.head_s;
    const double rest = (r.generated - kSteadyAfter) / std::max(r.gen_s - r.head_s, 1e-9);
    std::fprintf(stderr, "generation: the first %d tokens %.1f tok/s, the other %d %.1f tok/s (first / other %.2f)\n",
                 kSteadyAfter, head, r.generated - kSteadyAfter, rest, head / rest);
  }
  if (!r.spec.empty()) std::fprintf(stderr, "%s\n", r.spec.c_str());
  if (usage == nullptr) {
    std::fputs("experts: not counted (the GPU's decode graphs return no routing; --record-routing FILE counts them)\n", stderr);
    return;
  }
  usage->print(hp.n_expert, r.n_prompt + static_cast<uint64_t>(std::max(0, r.generated - 1)));
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "w"), fclose);
  if (!out) return io_error("cannot create '" + path + "'");
  if (std::fwrite(text.data(), 1, text.size(), out.get()) != text.size()) return io_error("cannot write '" + path + "'");
  return {};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// -e: llama.cpp's escapes (\n \r \t \\ \' \" \0 and \xHH); an unknown one stays as typed.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case '0': out += '\0'; break;
      case '\\': case '\'': case '"': out += c; break;
      default:
        if (c == 'x' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
          out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

// The prompt: -p, or the whole of -f FILE; with -e its escapes processed.
Status resolve_prompt(RunFlags& f, bool prompt_given) {
  if (!f.prompt_file.empty()) {
    if (prompt_given) return invalid_argument("give the prompt with -p or -f, not both");
    std::ifstream in(f.prompt_file, std::ios::binary);
    if (!in) return io_error("-f: cannot read '" + f.prompt_file + "'");
    std::ostringstream text;
    text << in.rdbuf();
    f.prompt = text.str();
  }
  if (f.escape) f.prompt = unescape(f.prompt);
  return {};
}

int run(RunFlags f) {
  if (f.model.empty()) f.model = default_model();
  if (f.n_predict < -1) return fail("run", invalid_argument("-n must be >= 0 (or -1: until the context is full)"));
  Status valid = validate(f.sampling);
  if (!valid.ok()) return fail("run", valid);
  auto kv_type = type_from_name(f.kv_type);
  if (!kv_type) return fail("run", invalid_argument("--kv-type: unknown type '" + f.kv_type + "'"));

  const auto t_load = std::chrono::steady_clock::now();
  const bool tiered = !f.tiering.expert_cache.empty();
  auto engine = Engine::load(f.model, f.threads, !f.no_interleave, f.device, tiered);
  if (!engine.ok()) return fail("run", engine.status());
  const Model* model = &(*engine)->model();
  auto tokenizer = Tokenizer::from_gguf(model->file());
  if (!tokenizer.ok()) return fail("run", tokenizer.status());
  const HParams& hp = model->hparams();
  if (tokenizer->n_vocab() != hp.n_vocab) return fail("run", data_loss("tokenizer and model disagree on the vocabulary size"));

  auto encoded = encode_prompt(f, *model, *tokenizer);
  if (!encoded.ok()) return fail("run", encoded.status());
  const std::vector<int32_t> prompt = std::move(*encoded);
  auto checked_ctx = check_context(model->file(), {f.n_ctx, std::min<uint32_t>(hp.n_ctx_train, 4096), *kv_type,
                                                   !(*engine)->on_gpu()});
  if (!checked_ctx.ok()) return fail("run", checked_ctx.status());
  const uint32_t n_ctx = *checked_ctx;
  if (f.n_predict == -1 && prompt.size() < n_ctx) f.n_predict = static_cast<int>(n_ctx - prompt.size());
  if (prompt.size() + static_cast<size_t>(std::max(f.n_predict, 0)) > n_ctx) {
    return fail("run", out_of_range("prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(f.n_predict) +
                             " exceed the context of " + std::to_string(n_ctx) + " (-c)"));
  }
  // Experts tiered (--expert-cache) through the GPU's device cache, or on the CPU through
  // the simulated device.
  TieringSetup tiering;
  if (tiered) {
    auto r = resolve_tiering(model->file(), f.tiering, f.banks, (*engine)->on_gpu());
    if (!r.ok()) return fail("run", r.status());
    tiering = std::move(r->setup);
    auto pick = pick_policy_for_replay(*model, f.routing, f.tiering, tiering);
    if (!pick.ok()) return fail("run", pick.status());
    if (!pick->empty()) std::fprintf(stderr, "%s\n", pick->c_str());
    if (Status st = (*engine)->enable_tiering(tiering, r->banks); !st.ok()) return fail("run", st);
  } else if (f.stats || !f.stats_json.empty()) {
    return fail("run", invalid_argument("--stats and --stats-json report the expert cache: give --expert-cache"));
  }
  const ExpertScheduler* scheduler = (*engine)->tiering_scheduler();  // null without tiering
  const std::vector<LayerTiming>* timing = (*engine)->tiering_timing();
  auto session = Sequence::create((*engine)->backend(), n_ctx, *kv_type);
  if (!session.ok()) return fail("run", session.status());
  const double load_s = seconds_since(t_load);

  Sampler sampler(f.sampling, hp.n_vocab);
  for (int32_t id : prompt) sampler.accept(id);
  StreamDecoder decoder(*tokenizer);
  StopMatcher stops(f.stops);
  std::unique_ptr<FILE, int (*)(FILE*)> record(nullptr, fclose);
  if (!f.record_routing.empty()) {
    record.reset(std::fopen(f.record_routing.c_str(), "w"));
    if (!record) return fail("run", io_error("cannot create '" + f.record_routing + "'"));
  }
  std::unique_ptr<RoutingReplay> replay;
  if (!f.routing.empty()) {
    auto r = make_routing_replay(*model, f.routing);
    if (!r.ok()) return fail("run", r.status());
    replay = std::move(*r);
    std::fprintf(stderr, "routing replayed from %s: the experts computed are the stream's, the text is meaningless, the speed is real\n",
                 replay->describe().c_str());
  }
  UsageTrace usage(record.get(), replay.get());
  // On the GPU, resident, a decode step is a graph replay that returns no routing: counting
  // the experts there (a copy and a sync per layer, every launch from the host) would slow
  // every token below bench's tg. There the usage is counted only when recorded or replayed.
  UsageTrace* counted = !(*engine)->on_gpu() || (*engine)->tiering_scheduler() != nullptr || record || replay ? &usage : nullptr;
  Trace* trace = counted;

  std::fputs(f.chat || !f.chat_template_file.empty() ? "" : f.prompt.c_str(), stdout);
  std::fflush(stdout);
  std::vector<float> logits;
  std::unique_ptr<SpeculativeDecoder> spec;
  SpecSetup spec_setup;
  if (f.spec.any()) {  // before the prompt: a drafter may read the target's states of it (--mtp)
    if (replay != nullptr || record != nullptr) {
      return fail("run", invalid_argument("--routing and --record-routing follow one token per step: not with a drafter"));
    }
    auto made = make_spec(f.spec, {engine->get(), &*tokenizer, &prompt, f.n_predict, n_ctx, f.sampling, f.threads, f.device});
    if (!made.ok()) return fail("run", made.status());
    spec_setup = std::move(*made);
    if (Status p = spec_setup.drafter->prepare_target((*engine)->backend(), session->id()); !p.ok()) return fail("run", p);
    spec = std::make_unique<SpeculativeDecoder>((*engine)->backend(), session->id(), *spec_setup.drafter, spec_setup.config);
  }
  const auto t_prompt = std::chrono::steady_clock::now();
  Status s = session->feed(prompt, false, &logits, trace);
  if (!s.ok()) return fail("run", s);
  const double prompt_s = seconds_since(t_prompt);

  const auto t_gen = std::chrono::steady_clock::now();
  int generated = 0;
  double first_token_s = 0, head_s = 0;
  bool stopped = false;
  const char* reason = "length";
  // Shows one produced token; true when generation ends with it.
  auto emit = [&](int32_t next) {
    ++generated;
    if (generated == 1) first_token_s = seconds_since(t_load);
    if (generated == kSteadyAfter) head_s = seconds_since(t_gen);
    if (tokenizer->is_eog(next)) {
      reason = "end of text";
      return true;
    }
    auto out = stops.push(decoder.push(next));
    std::fputs(out.emit.c_str(), stdout);
    std::fflush(stdout);
    if (out.stopped) {
      reason = "stop string";
      stopped = true;
      return true;
    }
    return generated == f.n_predict;
  };
  if (spec != nullptr && f.n_predict > 0) {
    std::vector<int32_t> history = prompt;  // every token but the last is in the session
    history.push_back(sampler.sample(logits));
    sampler.accept(history.back());
    bool done = emit(history.back());
    while (!done) {
      const size_t before = history.size();
      s = spec->step(&history, sampler, f.n_predict - generated, trace);
      if (!s.ok()) return fail("run", s);
      for (size_t i = before; i < history.size() && !done; ++i) done = emit(history[i]);
    }
  } else {
    // Greedy without bias or penalties: each step returns its pick alone (on the GPU the
    // decode graph reduces the row; Sampler::picks_argmax).
    const bool argmax_only = sampler.picks_argmax();
    std::vector<int32_t> picks;
    int32_t next = f.n_predict > 0 ? sampler.sample(logits) : 0;
    while (generated < f.n_predict && !stopped) {
      sampler.accept(next);
      if (emit(next)) break;
      if (argmax_only) {
        s = session->feed_argmax({&next, 1}, false, &picks, trace);
        if (s.ok()) next = picks.at(0);
      } else {
        s = session->feed({&next, 1}, false, &logits, trace);
        if (s.ok()) next = sampler.sample(logits);
      }
      if (!s.ok()) return fail("run", s);
    }
  }
  if (!stopped) {
    auto rest = stops.push(decoder.flush());
    std::fputs(rest.emit.c_str(), stdout);
    if (!rest.stopped) std::fputs(stops.flush().c_str(), stdout);
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double gen_s = seconds_since(t_gen);

  const RunReport report{load_s,      prompt_s, gen_s,
                         first_token_s, head_s,
                         spec != nullptr ? spec_summary(*spec_setup.drafter, spec->stats()) : "",
                         prompt.size(), generated, reason, sampler.seed()};
  if (log_level() <= LogLevel::kInfo) print_report(f, **engine, report, counted);
  if (scheduler != nullptr && f.stats) {
    std::fputs(stats_text(*scheduler, tiering.policy, tiering.budget, timing).c_str(), stderr);
    std::fprintf(stderr, "%s\n", (*engine)->tiering_summary().c_str());
  }
  if (scheduler != nullptr && !f.stats_json.empty()) {
    Status st = write_text_file(f.stats_json, stats_json(*scheduler, tiering.policy, tiering.budget, timing) + "\n");
    if (!st.ok()) return fail("run", st);
  }
  return 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  app.add_option("-m,--model", f->model, "GGUF model (default: the embedded demo model)");
  CLI::Option* prompt = app.add_option("-p,--prompt", f->prompt, "prompt text");
  app.add_option("-f,--file", f->prompt_file, "read the prompt from a file (llama.cpp's -f)");
  app.add_flag("-e,--escape", f->escape, "process escapes in the prompt: \\n \\t \\\\ \\\" \\xHH ...");
  app.add_option("-n,--n-predict", f->n_predict, "tokens to generate (default 64; -1: until the end of text or a full context)");
  app.add_option("-t,--threads", f->threads, "threads (0 = all, the default; more than the hardware threads warns)");
  app.add_option("--record-routing", f->record_routing,
                 "write every routing decision (layer, position, experts, weights) as JSON lines");
  app.add_option("--routing", f->routing,
                 "compute the experts of a routing stream instead of the router's: synth:KEY=VALUE,... (simulate's "
                 "generator) or trace:FILE (a --record-routing record); the text is then meaningless, the speed real");
  app.add_flag("--no-interleave", f->no_interleave,
               "keep every weight in the memory map (no interleaved Q4_K/Q6_K copies): less memory, slower");
  app.add_option("-c,--ctx-size", f->n_ctx, "context size (0 = the default: min(training context, 4096); above the training context warns)");
  app.add_flag("--chat", f->chat, "wrap the prompt in the model's chat template (ChatML when it has none)");
  app.add_option("--chat-template-file", f->chat_template_file, "Jinja chat template to use instead of the model's (implies --chat)");
  app.add_option("--system", f->system, "system message (with --chat)");
  add_seed_option(app, &f->sampling.seed, "random seed (-1 or 0 = random, the default; printed at the end)");
  app.add_option("--temp", f->sampling.temperature, "temperature (0 = greedy; default 0.8)");
  app.add_option("--top-k", f->sampling.top_k, "top-k (0 = off; default 40)");
  app.add_option("--top-p", f->sampling.top_p, "top-p (1 = off; default 0.95)");
  app.add_option("--min-p", f->sampling.min_p, "min-p (0 = off; default 0.05)");
  app.add_option("--repeat-penalty", f->sampling.repeat_penalty, "repetition penalty (1 = off)");
  app.add_option("--repeat-last-n", f->sampling.repeat_last_n, "window of the penalties (default 64)");
  app.add_option("--presence-penalty", f->sampling.presence_penalty, "presence penalty (0 = off)");
  app.add_option("--frequency-penalty", f->sampling.frequency_penalty, "frequency penalty (0 = off)");
  app.add_option("--stop", f->stops, "stop string (repeatable)");
  app.add_option("--kv-type", f->kv_type, "KV cache type: f16 (default), q8_0, f32");
  add_device_flags(app, &f->device);
  add_tiering_flags(app, &f->tiering);
  add_bank_flags(app, &f->banks);
  add_spec_flags(app, &f->spec);
  app.add_flag("--stats", f->stats, "print the expert cache counters per layer (with --expert-cache)");
  app.add_option("--stats-json", f->stats_json, "write the expert cache counters as JSON (with --expert-cache)");
  return [f, prompt] {
    if (Status s = resolve_prompt(*f, prompt->count() > 0); !s.ok()) return fail("run", s);
    return run(*f);
  };
}

}  // namespace mt::cli
