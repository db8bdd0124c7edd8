// moetier bench: prompt-processing and generation throughput, llama-bench style, so the
// two can be run side by side on the same file and threads (bench/compare_llamacpp.sh).
//
// pp<N>: one batch of N random valid token ids fed to a fresh sequence (tokens/s = N / time).
// tg<N>: N single-token steps from an empty context, each token random (as llama-bench's
// tg: the sampled token does not matter for speed). -p and -n take lists (-p 512,4096): every
// pp, then every tg; output as a markdown table, CSV, JSON or JSON lines. Each test runs once as a warm-up
// (llama-bench's: the full prompt for pp, one token for tg), then -r timed repetitions,
// each in a fresh sequence created outside the timed region.
//
// Decode is memory-bound, so tg also reports the bytes of weights one token reads
// (active_bytes_per_token: every non-expert tensor the token touches, one embedding row,
// and n_expert_used experts per MoE layer) and the bandwidth that implies; with --membw
// (from bench/moetier_membw) the fraction of that roofline reached.
//
// With --expert-cache (and the other tiering flags of `run`) the experts are tiered
// (Engine::enable_tiering: the GPU's device cache, or the CPU's simulated device), one
// fresh expert cache per test (its warm-up run warms it); each test reports the tiering
// counters of its warm-up and timed runs: JSON "tiering" (experts/stats.h's schema), and
// a line per test in markdown.
//
// With --routing synth:...|trace:FILE every MoE layer computes the experts of that stream
// instead of the router's (experts/routing_replay.h; one stream across the whole bench,
// warm-ups included): the speed of a realistic routing on a random-weight model. JSON
// "routing" names the stream ("router" without one).
//
// With --batch B1,B2,... the tests are batched decode instead (llama-batched-bench's TG):
// for every -p P, -n N and B, B sequences each prefilled with its own P random tokens
// (untimed), then N steps that each evaluate one token of every sequence in one
// Backend::eval (every row's logits, as a server's step); t/s = B x N / time, and the
// step's milliseconds. B = 1 is tg through the same call.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/cli/bench_report.h"
#include "apps/cli/commands.h"
#include "apps/cli/engine.h"
#include "apps/cli/sizes.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/tiering_flags.h"
#include "core/log.h"
#include "experts/geometry.h"
#include "experts/stats.h"
#include "model/model.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

// The feeds' Trace under --routing: it carries the replay and wants nothing back (a CUDA
// step then copies no routing to the host).
class ReplayTrace final : public Trace {
 public:
  explicit ReplayTrace(RoutingReplay* replay) : replay_(replay) {}
  RoutingReplay* routing_override() override { return replay_; }
  bool wants_routing() const override { return false; }

 private:
  RoutingReplay* replay_;
};

// Bytes of weights one generated token reads. Expert bytes per layer come from the
// expert geometry (the same numbers the host bank is sized with).
StatusOr<uint64_t> active_bytes_per_token(const Model& model) {
  const gguf::GgufFile& file = model.file();
  const ModelWeights& w = model.weights();
  uint64_t total = 0;
  auto add = [&](const Tensor& t) {
    if (!t.present()) return;
    const gguf::TensorInfo* info = file.find_tensor(t.name);
    total += info ? info->nbytes : t.matrix_bytes * t.ne[2] * t.ne[3];
  };
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.wo,
                            &l.ffn_norm, &l.router, &l.shexp_gate_inp, &l.shexp_gate, &l.shexp_up, &l.shexp_down,
                            &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      add(*t);
    }
  }
  add(w.output_norm);
  add(w.output);  // the whole token_embd matrix when tied
  total += w.token_embd.row_bytes;
  if (model.hparams().n_expert > 0) {
    MT_ASSIGN_OR_RETURN(ExpertGeometry geo, read_expert_geometry(file));
    for (const LayerExpertGeometry& l : geo.layers) total += model.hparams().n_expert_used * l.bytes_per_expert();
  }
  return total;
}

class Bench {
 public:
  Bench(Engine& engine, const BenchFlags& f, const TieringSetup* tiering, const BankOptions& banks,
        RoutingReplay* replay)
      : engine_(engine), model_(engine.model()), f_(f), tiering_(tiering), banks_(banks), rng_(1234), replay_(replay) {}

  // One test: a warm-up, then f_.reps timed runs. Exactly one of n_prompt, n_gen is > 0.
  StatusOr<TestResult> run_test(int n_prompt, int n_gen, int n_batch = 0) {
    TestResult r;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.n_batch = n_batch;
    if (tiering_ != nullptr) MT_RETURN_IF_ERROR(engine_.enable_tiering(*tiering_, banks_));  // a fresh expert cache
    const bool spec = f_.spec.any() && n_gen > 0 && n_batch == 0;
    if (spec) MT_RETURN_IF_ERROR(prepare_spec(n_gen));
    Progress progress("bench " + r.name(), static_cast<uint64_t>(f_.reps) + 1, f_.output == "md", "runs");
    progress.update(0);
    MT_ASSIGN_OR_RETURN(double warm_ns, spec          ? run_spec(std::min(n_gen, 8), nullptr)
                                        : n_batch > 0 ? run_batched(n_prompt, 1, n_batch)
                                                      : run_once(n_prompt, n_prompt > 0 ? 0 : 1));
    (void)warm_ns;
    for (int i = 0; i < f_.reps; ++i) {
      progress.update(static_cast<uint64_t>(i) + 1);
      MT_ASSIGN_OR_RETURN(double ns, spec          ? run_spec(n_gen, &r)
                                     : n_batch > 0 ? run_batched(n_prompt, n_gen, n_batch)
                                                   : run_once(n_prompt, n_gen));
      r.samples_ns.push_back(static_cast<uint64_t>(ns));
      r.samples_ts.push_back(1e9 * static_cast<double>(r.tokens()) / ns);
      if (spec) {
        MT_ASSIGN_OR_RETURN(double plain_ns, run_spec(n_gen, nullptr, false));
        r.undrafted_ts.push_back(1e9 * static_cast<double>(r.tokens()) / plain_ns);
      }
    }
    progress.update(static_cast<uint64_t>(f_.reps) + 1);
    progress.finish();
    r.summarize();
    const ExpertScheduler* scheduler = engine_.tiering_scheduler();
    if (tiering_ != nullptr && scheduler != nullptr) {
      r.tiering_json = stats_json(*scheduler, tiering_->policy, tiering_->budget, engine_.tiering_timing());
      const std::string text = stats_text(*scheduler, tiering_->policy, tiering_->budget);
      r.tiering_text = text.substr(0, text.find('\n'));
      if (engine_.on_gpu()) r.tiering_text += "; " + engine_.tiering_summary();
      if (n_gen > 0 && n_batch == 0 && !spec) {
        // tg: the counters are the decode steps' alone (the warm-up's token included)
        r.roofline = tier_roofline(*scheduler, scheduler->options().hw);
      }
    }
    if (spec) {
      r.spec_text = spec_summary(*spec_.drafter, r.spec);
      r.draft = spec_.drafter->describe();
    }
    return r;
  }

 private:
  int32_t random_token() {
    return static_cast<int32_t>(std::uniform_int_distribution<uint32_t>(0, model_.hparams().n_vocab - 1)(rng_));
  }

  // Nanoseconds for one pp (a batch of n_prompt tokens) or one tg (n_gen single tokens).
  StatusOr<double> run_once(int n_prompt, int n_gen) {
    const uint32_t n_ctx = static_cast<uint32_t>(std::max(1, n_prompt + n_gen));
    MT_ASSIGN_OR_RETURN(Sequence session, Sequence::create(engine_.backend(), n_ctx));
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int32_t& t : prompt) t = random_token();
    int32_t token = random_token();
    Trace* trace = replay_.routing_override() != nullptr ? &replay_ : nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    if (n_prompt > 0) MT_RETURN_IF_ERROR(session.feed(prompt, false, &logits_, trace));
    for (int i = 0; i < n_gen; ++i) {
      MT_RETURN_IF_ERROR(session.feed({&token, 1}, false, &logits_, trace));
      token = random_token();
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }

  // A drafter for tg tests of n_gen tokens: the prompt (kSpecPrompt random tokens) and, for
  // the labelled mode, its plain greedy continuation (make_spec decodes it here, untimed),
  // which holds every run's output (ScriptedDrafter's hold: near ties the batched rows or
  // a tiered run's timing decide otherwise keep the script, counted), so every timed run,
  // drafted or not, decodes the same text at the same staged acceptance.
  Status prepare_spec(int n_gen) {
    spec_prompt_.resize(kSpecPrompt);
    for (int32_t& t : spec_prompt_) t = random_token();
    const uint32_t n_ctx = static_cast<uint32_t>(kSpecPrompt + n_gen + f_.spec.draft_max + 2);
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.seed = 1;
    spec_ = {};
    warm_policy_.reset();
    // Under --routing the reference is decoded with the routing the timed runs replay
    RoutingReplay* replay = replay_.routing_override();
    if (replay != nullptr) replay->rewind();
    MT_ASSIGN_OR_RETURN(spec_, make_spec(f_.spec, {&engine_, tokenizer_, &spec_prompt_, n_gen + 1, n_ctx, greedy,
                                                   f_.threads, f_.device, replay != nullptr ? &replay_ : nullptr, true}));
    return {};
  }

  // Nanoseconds for n_gen tokens decoded greedily with the drafter after the prompt's first
  // one (the prompt's prefill untimed); the steps' counts and times by rows are added to
  // *result (null: an untimed or undrafted run).
  StatusOr<double> run_spec(int n_gen, TestResult* result, bool drafts = true) {
    Backend& backend = engine_.backend();
    auto* scripted = dynamic_cast<ScriptedDrafter*>(spec_.drafter.get());
    if (scripted != nullptr) {
      // The same guesses and, under --routing, the same routing: each run is the same work
      scripted->restart();
      if (RoutingReplay* replay = replay_.routing_override()) replay->rewind();
    }
    const uint32_t n_ctx = static_cast<uint32_t>(kSpecPrompt + n_gen + f_.spec.draft_max + 2);
    MT_ASSIGN_OR_RETURN(Sequence session, Sequence::create(backend, n_ctx));
    MT_RETURN_IF_ERROR(spec_.drafter->prepare_target(backend, session.id()));
    Trace* trace = replay_.routing_override() != nullptr ? &replay_ : nullptr;
    MT_RETURN_IF_ERROR(session.feed(spec_prompt_, false, &logits_, trace));
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.seed = 1;
    Sampler sampler(greedy, backend.n_vocab());
    for (int32_t t : spec_prompt_) sampler.accept(t);
    std::vector<int32_t> history = spec_prompt_;
    history.push_back(sampler.sample(logits_));
    int32_t scripted_first;  // the labelled mode holds the first token to its script as well
    if (spec_.drafter->scripted_token(history.size() - 1, &scripted_first)) history.back() = scripted_first;
    sampler.accept(history.back());
    SpecConfig config = spec_.config;
    if (!drafts) config.draft_max = config.draft_min = 0, config.adaptive = false;  // every step a plain one
    SpeculativeDecoder decoder(backend, session.id(), *spec_.drafter, config);
    // The step costs carry from run to run (the warm-up's first): they are the machine's,
    // as a server's would be after its first request; each run's acceptance starts anew.
    if (drafts && warm_policy_) decoder.warm_start(*warm_policy_);
    const size_t end = history.size() + static_cast<size_t>(n_gen);
    const auto t0 = std::chrono::steady_clock::now();
    RoutingReplay* replay = trace != nullptr ? replay_.routing_override() : nullptr;
    while (history.size() < end) {
      // Under --routing a position keeps its entry: the rejected guesses' rows give theirs back.
      if (replay != nullptr) replay->mark();
      const uint64_t emitted = decoder.stats().emitted, drafted = decoder.stats().drafted;
      const auto s0 = std::chrono::steady_clock::now();
      MT_RETURN_IF_ERROR(decoder.step(&history, sampler, static_cast<int>(end - history.size()), trace));
      if (result != nullptr) {  // the step's time by its rows
        const size_t rows = static_cast<size_t>(decoder.stats().drafted - drafted) + 1;
        if (result->steps_by_rows.size() <= rows) result->steps_by_rows.resize(rows + 1);
        ++result->steps_by_rows[rows].steps;
        result->steps_by_rows[rows].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      }
      if (replay != nullptr) replay->back_to_mark(static_cast<uint32_t>(decoder.stats().emitted - emitted));
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (drafts) warm_policy_ = decoder.policy();
    if (result != nullptr) {
      SpecStats* stats = &result->spec;
      stats->steps += decoder.stats().steps;
      stats->drafted += decoder.stats().drafted;
      stats->accepted += decoder.stats().accepted;
      stats->emitted += decoder.stats().emitted;
      stats->backed_off += decoder.stats().backed_off;
      stats->held += decoder.stats().held;
    }
    return ns;
  }

  // Nanoseconds for n_gen steps of one token from each of n_batch sequences (each first
  // prefilled, untimed, with its own n_prompt tokens).
  StatusOr<double> run_batched(int n_prompt, int n_gen, int n_batch) {
    Backend& backend = engine_.backend();
    Trace* trace = replay_.routing_override() != nullptr ? &replay_ : nullptr;
    std::vector<Sequence> seqs;
    for (int s = 0; s < n_batch; ++s) {
      MT_ASSIGN_OR_RETURN(Sequence seq, Sequence::create(backend, static_cast<uint32_t>(n_prompt + n_gen)));
      std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
      for (int32_t& t : prompt) t = random_token();
      if (n_prompt > 0) MT_RETURN_IF_ERROR(seq.feed(prompt, false, &logits_, trace));
      seqs.push_back(std::move(seq));
    }
    Batch batch;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_gen; ++i) {
      batch.clear();
      for (const Sequence& seq : seqs) batch.add(seq.id(), seq.position(), random_token(), true);
      MT_RETURN_IF_ERROR(backend.eval(batch, &logits_, trace));
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }

  Engine& engine_;
  const Model& model_;
  const BenchFlags& f_;
  const TieringSetup* tiering_;             // null: no tiering
  std::optional<DraftPolicy> warm_policy_;  // the last drafted run's policy (its step costs start the next)
  BankOptions banks_;
  std::mt19937 rng_;
  ReplayTrace replay_;  // carries --routing's stream (null: the router's own routing)
  std::vector<float> logits_;
  const Tokenizer* tokenizer_ = nullptr;  // set with a drafter (the draft model's vocabulary check)
  std::vector<int32_t> spec_prompt_;
  SpecSetup spec_;

 public:
  void set_tokenizer(const Tokenizer* tokenizer) { tokenizer_ = tokenizer; }
};

int run(const BenchFlags& f) {
  if (f.model.empty()) return fail("bench", invalid_argument("-m FILE is required"));
  int max_p = 0, max_n = 0;
  for (int p : f.n_prompt) max_p = std::max(max_p, p);
  for (int n : f.n_gen) max_n = std::max(max_n, n);
  for (const std::vector<int>* list : {&f.n_prompt, &f.n_gen}) {
    for (int v : *list) {
      if (v < 0) return fail("bench", invalid_argument("-p and -n must be >= 0"));
    }
  }
  if (max_p == 0 && max_n == 0) return fail("bench", invalid_argument("nothing to run: -p and -n are both 0"));
  if (f.reps < 1) return fail("bench", invalid_argument("-r must be >= 1"));
  if (f.threads < 0) return fail("bench", invalid_argument("-t must be >= 0"));
  if (f.membw_gbps < 0) return fail("bench", invalid_argument("--membw must be > 0"));
  for (int b : f.batch) {
    if (b < 1 || b > 256) return fail("bench", invalid_argument("--batch values must be 1..256"));
  }
  if (!f.batch.empty() && max_n == 0) return fail("bench", invalid_argument("--batch needs -n > 0"));

  const bool tiered = !f.tiering.expert_cache.empty();
  auto engine = Engine::load(f.model, f.threads, !f.no_interleave, f.device, tiered);
  if (!engine.ok()) return fail("bench", engine.status());
  const Model* model = &(*engine)->model();
  const HParams& hp = model->hparams();
  if (static_cast<uint64_t>(max_p) + static_cast<uint64_t>(max_n) > hp.n_ctx_train && hp.n_ctx_train > 0) {
    log_warn("-p + -n exceed the model's training context (" + std::to_string(hp.n_ctx_train) + ")");
  }
  ModelFacts m;
  m.name = std::filesystem::path(f.model).filename().string();
  m.arch = std::string(arch_info(hp.arch).name);
  m.model_bytes = model->file().file_size();
  for (const gguf::TensorInfo& t : model->file().tensors()) m.n_params += t.n_elements();
  auto active = active_bytes_per_token(*model);
  if (!active.ok()) return fail("bench", active.status());
  m.active_bytes_per_token = *active;
  const int threads = model->pool().size();

  TieringSetup tiering;
  BankOptions banks;
  if (tiered) {
    auto r = resolve_tiering(model->file(), f.tiering, f.banks, (*engine)->on_gpu());
    if (!r.ok()) return fail("bench", r.status());
    tiering = std::move(r->setup);
    banks = r->banks;
    auto pick = pick_policy_for_replay(*model, f.routing, f.tiering, tiering);
    if (!pick.ok()) return fail("bench", pick.status());
    if (!pick->empty()) std::fprintf(stderr, "%s\n", pick->c_str());
  }
  std::unique_ptr<RoutingReplay> replay;
  if (!f.routing.empty()) {
    auto r = make_routing_replay(*model, f.routing);
    if (!r.ok()) return fail("bench", r.status());
    replay = std::move(*r);
  }
  Bench bench(**engine, f, tiered ? &tiering : nullptr, banks, replay.get());
  std::optional<Tokenizer> tokenizer;
  if (f.spec.any()) {
    if (!f.batch.empty()) return fail("bench", invalid_argument("--batch and a drafter: give one"));
    auto t = Tokenizer::from_gguf(model->file());
    if (!t.ok()) return fail("bench", t.status());
    tokenizer.emplace(std::move(*t));
    bench.set_tokenizer(&*tokenizer);
  }
  std::vector<TestResult> results;
  std::vector<std::pair<int, int>> tests;  // llama-bench's order: every pp, then every tg
  if (f.batch.empty()) {
    for (int p : f.n_prompt) tests.emplace_back(p, 0);
    for (int n : f.n_gen) tests.emplace_back(0, n);
  }
  for (auto [p, n] : tests) {
    if (p + n == 0) continue;
    auto r = bench.run_test(p, n);
    if (!r.ok()) return fail("bench", r.status());
    results.push_back(std::move(*r));
  }
  for (int p : f.batch.empty() ? std::vector<int>{} : f.n_prompt) {  // --batch: every P x N x B
    for (int n : f.n_gen) {
      for (int b : n > 0 ? f.batch : std::vector<int>{}) {
        auto r = bench.run_test(p, n, b);
        if (!r.ok()) return fail("bench", r.status());
        results.push_back(std::move(*r));
      }
    }
  }
  if (f.output == "json") {
    nlohmann::ordered_json array = result_rows(m, f, threads, results);
    std::printf("%s\n", array.dump(2).c_str());
  } else if (f.output == "jsonl") {
    for (const nlohmann::ordered_json& row : result_rows(m, f, threads, results)) std::printf("%s\n", row.dump().c_str());
  } else if (f.output == "csv") {
    print_csv(result_rows(m, f, threads, results));
  } else {
    print_markdown(m, f, threads, results);
    if (replay) {
      const std::string wraps =
          replay->wraps() > 0 ? ", the trace started over " + std::to_string(replay->wraps()) + " times (over all layers)" : "";
      std::printf("routing: replayed from %s; %llu tokens per MoE layer (warm-ups included)%s\n", replay->describe().c_str(),
                  static_cast<unsigned long long>(replay->tokens_per_block()), wraps.c_str());
    }
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  app.add_option("-m,--model", f->model, "GGUF model")->required();
  app.add_option("-p,--n-prompt", f->n_prompt, "prompt tokens of the pp tests, a list: 512,4096 (default 512; 0 = skip)")
      ->delimiter(',');
  app.add_option("-n,--n-gen", f->n_gen, "generated tokens of the tg tests, a list: 128,256 (default 128; 0 = skip)")
      ->delimiter(',');
  app.add_option("-t,--threads", f->threads, "threads (0 = all, the default; more than the hardware threads warns)");
  app.add_flag("--no-interleave", f->no_interleave,
               "keep every weight in the memory map (no interleaved Q4_K/Q6_K copies): less memory, slower");
  app.add_option("-r,--repetitions", f->reps, "timed repetitions per test, after one warm-up (default 5)");
  app.add_option("-o,--output", f->output, "output format: md (default), csv, json or jsonl")
      ->check(CLI::IsMember({"md", "csv", "json", "jsonl"}));
  add_device_flags(app, &f->device);
  app.add_option("--membw", f->membw_gbps, "host memory read bandwidth in GB/s (moetier_membw): adds tg's roofline fraction");
  add_tiering_flags(app, &f->tiering);
  add_bank_flags(app, &f->banks);
  add_spec_flags(app, &f->spec);
  app.add_option("--routing", f->routing,
                 "compute the experts of a routing stream instead of the router's: synth:KEY=VALUE,... (simulate's "
                 "generator, e.g. synth:preset=qwen3-30b) or trace:FILE (a run --record-routing record)");
  app.add_option("--batch", f->batch,
                 "batched decode instead of pp / tg, a list of sequence counts: 1,2,4,8 (each -p is every sequence's "
                 "untimed prefill, each -n the timed steps)")
      ->delimiter(',');
  return [f] { return run(*f); };
}

}  // namespace mt::cli
