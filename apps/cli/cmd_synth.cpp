// moetier synth: a synthetic GGUF of a real architecture with real checkpoint geometry.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "apps/cli/commands.h"
#include "core/log.h"
#include "quant/types.h"
#include "synth/synth.h"

namespace mt::cli {
namespace {

struct SynthFlags {
  std::string preset, arch, quant, vocab, output;
  std::vector<std::string> layer_types;
  std::optional<uint32_t> layers, embd, heads, heads_kv, head_dim, experts, experts_used, expert_ff, shared_ff, ff,
      vocab_size, ctx;
  std::optional<float> rope_base, rms_eps, router_skew;
  std::optional<uint64_t> seed;
  bool tie_output = false, fast = false, sparse = false, json = false;
};

int run(const SynthFlags& f) {
  synth::SynthConfig c;
  if (!f.preset.empty()) {
    auto p = synth::preset(f.preset);
    if (!p.ok()) return fail("synth", p.status());
    c = *p;
  }
  if (!f.arch.empty()) {
    auto a = arch_from_name(f.arch);
    if (!a) {
      std::string known;
      for (const ArchInfo& info : all_archs()) known += std::string(known.empty() ? "" : ", ") + std::string(info.name);
      return fail("synth", invalid_argument("unknown architecture '" + f.arch + "' (known: " + known + ")"));
    }
    if (f.preset.empty()) c = synth::tiny_for(*a);
    c.arch = *a;
  }
  if (!f.quant.empty()) {
    auto q = synth::parse_quant_mix(f.quant);
    if (!q.ok()) return fail("synth", q.status());
    c.quant = *q;
  }
  const size_t preset_overrides = c.layer_types.size();
  for (const std::string& spec : f.layer_types) {
    auto o = synth::parse_layer_override(spec);
    if (!o.ok()) return fail("synth", o.status());
    c.layer_types.push_back(*o);
  }
  auto set = [](auto& dst, const auto& src) {
    if (src) dst = *src;
  };
  set(c.n_layer, f.layers); set(c.n_embd, f.embd); set(c.n_head, f.heads); set(c.n_head_kv, f.heads_kv);
  if (f.layers) {  // a shortened preset keeps its per-layer types on the layers it still has
    for (size_t i = 0; i < preset_overrides; ++i) {
      std::vector<uint32_t>& ls = c.layer_types[i].layers;
      ls.erase(std::remove_if(ls.begin(), ls.end(), [&](uint32_t l) { return l >= c.n_layer; }), ls.end());
    }
  }
  set(c.head_dim, f.head_dim); set(c.n_expert, f.experts); set(c.n_expert_used, f.experts_used);
  set(c.n_ff_exp, f.expert_ff); set(c.n_ff_shexp, f.shared_ff); set(c.n_ff, f.ff); set(c.n_vocab, f.vocab_size);
  set(c.n_ctx, f.ctx); set(c.rope_freq_base, f.rope_base); set(c.rms_eps, f.rms_eps);
  set(c.router_skew, f.router_skew); set(c.seed, f.seed);
  if (f.tie_output) c.tie_output = true;
  c.vocab_path = f.vocab;
  c.fast = f.fast;
  c.sparse = f.sparse;

  auto summary = synth::write_model(c, {f.output, !f.json});
  if (!summary.ok()) return fail("synth", summary.status());
  if (f.json) {
    nlohmann::json j = {{"path", f.output},          {"preset", c.name},
                        {"architecture", std::string(arch_info(c.arch).name)},
                        {"quant", c.quant.name},     {"file_bytes", summary->file_bytes},
                        {"n_params", summary->n_params}, {"n_vocab", summary->n_vocab},
                        {"n_tensors", summary->n_tensors}, {"sparse", c.sparse}, {"fast", c.fast}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s: %s %s, %s, %u layers, %u experts (top-%u), %llu params, %s%s\n", f.output.c_str(),
                std::string(arch_info(c.arch).name).c_str(), c.name.c_str(), c.quant.name.c_str(), c.n_layer,
                c.n_expert, c.n_expert_used, static_cast<unsigned long long>(summary->n_params),
                human_bytes(summary->file_bytes).c_str(), c.sparse ? " (sparse)" : "");
  }
  return 0;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto f = std::make_shared<SynthFlags>();
  std::string presets;
  for (const std::string& p : synth::preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  app.add_option("-o,--output", f->output, "output GGUF path")->required();
  app.add_option("--preset", f->preset, "checkpoint geometry: " + presets);
  app.add_option("--arch", f->arch, "architecture: qwen3moe, qwen2moe, llama, olmoe, glm4moe, deepseek2, gpt-oss, laguna, qwen3next, qwen35moe (alone: a tiny model)");
  app.add_option("--quant", f->quant, "one type (q8_0, q4_k, bf16, ...) or a mix (q4_k_m, q5_k_m)");
  app.add_option("--layer-type", f->layer_types, "expert type override for layers, e.g. 0-3,8=bf16 (repeatable)");
  app.add_option("--vocab", f->vocab, "vocab GGUF to copy the tokenizer from (default: built-in byte vocab)");
  app.add_option("--router-skew", f->router_skew, "expert popularity skew: 0 uniform, 1 ~ Zipf");
  app.add_option("--seed", f->seed, "random seed (deterministic output)");
  app.add_option("--layers", f->layers, "block count");
  app.add_option("--embd", f->embd, "embedding length (n_embd)");
  app.add_option("--heads", f->heads, "attention heads");
  app.add_option("--heads-kv", f->heads_kv, "key/value heads");
  app.add_option("--head-dim", f->head_dim, "head dimension");
  app.add_option("--experts", f->experts, "experts per layer");
  app.add_option("--experts-used", f->experts_used, "experts selected per token (top-k)");
  app.add_option("--expert-ff", f->expert_ff, "expert width");
  app.add_option("--shared-ff", f->shared_ff, "shared expert width (qwen2moe)");
  app.add_option("--ff", f->ff, "feed_forward_length key (dense width)");
  app.add_option("--vocab-size", f->vocab_size, "vocabulary size (the built-in vocab is padded to it)");
  app.add_option("--ctx", f->ctx, "context length");
  app.add_option("--rope-base", f->rope_base, "RoPE frequency base");
  app.add_option("--rms-eps", f->rms_eps, "RMSNorm epsilon");
  app.add_flag("--tie-output", f->tie_output, "omit output.weight (tied to token_embd)");
  app.add_flag("--fast", f->fast, "random valid quantized blocks (multi-GB timing models in seconds)");
  app.add_flag("--sparse", f->sparse, "write only the header; the data section is a hole");
  app.add_flag("--json", f->json, "print the summary as JSON");
  return [f] { return run(*f); };
}

}  // namespace mt::cli
