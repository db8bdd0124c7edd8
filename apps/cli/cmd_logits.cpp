// moetier logits: raw float32 logits for every position and the routing decisions, in
// the same formats as the llama.cpp oracle (tests/oracle), so the two can be compared.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>

#include "apps/cli/commands.h"
#include "apps/cli/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {

void write_routing_line(FILE* f, uint32_t layer, uint32_t pos, uint64_t step, std::span<const int32_t> experts,
                        std::span<const float> weights) {
  std::fprintf(f, "{\"layer\": %u, \"pos\": %u, \"step\": %llu, \"experts\": [", layer, pos,
               static_cast<unsigned long long>(step));
  for (size_t i = 0; i < experts.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", experts[i]);
  std::fprintf(f, "], \"weights\": [");
  for (size_t i = 0; i < weights.size(); ++i) std::fprintf(f, "%s%.9g", i ? ", " : "", weights[i]);
  std::fprintf(f, "]}\n");
}
namespace {

struct LogitsFlags {
  std::string model, ids, prompt, output, routing, dump, kv_type = "f16";
  int threads = 0;
  bool no_interleave = false;
  DeviceFlags device;
};

// Routing as JSON lines: {"layer": L, "pos": P, "experts": [...], "weights": [...]}, and
// with a dump folder every named intermediate as <name>-<layer>.f32 (rows appended in
// position order, as tests/oracle/llama_oracle --dump writes llama.cpp's).
class RoutingWriter : public Trace {
 public:
  RoutingWriter(FILE* f, std::string dump_dir) : f_(f), dump_dir_(std::move(dump_dir)) {}
  void begin_step() override { ++steps_; }
  void tensor(const char* name, uint32_t layer, uint32_t, std::span<const float> row) override {
    if (dump_dir_.empty()) return;
    const std::string path = dump_dir_ + "/" + name + "-" + std::to_string(layer) + ".f32";
    if (FILE* df = std::fopen(path.c_str(), "ab")) {
      std::fwrite(row.data(), sizeof(float), row.size(), df);
      std::fclose(df);
    }
  }
  void routing(uint32_t layer, uint32_t pos, std::span<const int32_t> experts, std::span<const float> weights) override {
    if (f_ != nullptr) write_routing_line(f_, layer, pos, steps_ - 1, experts, weights);
  }

 private:
  FILE* f_;
  std::string dump_dir_;
  uint64_t steps_ = 0;
};

StatusOr<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data() + i, s.data() + j, v);
    if (ec != std::errc() || ptr != s.data() + j || j == i) {
      return invalid_argument("--ids: '" + s.substr(i, j - i) + "' is not a token id");
    }
    ids.push_back(v);
    i = j + 1;
  }
  if (ids.empty()) return invalid_argument("--ids is empty");
  return ids;
}

int run(const LogitsFlags& f) {
  if (f.ids.empty() == f.prompt.empty()) return fail("logits", invalid_argument("give exactly one of --ids and --prompt"));
  auto kv_type = type_from_name(f.kv_type);
  if (!kv_type) return fail("logits", invalid_argument("--kv-type: unknown type '" + f.kv_type + "'"));
  auto engine = Engine::load(f.model, f.threads, !f.no_interleave, f.device);
  if (!engine.ok()) return fail("logits", engine.status());
  const Model* model = &(*engine)->model();
  StatusOr<std::vector<int32_t>> ids = std::vector<int32_t>{};
  if (!f.prompt.empty()) {
    auto tokenizer = Tokenizer::from_gguf(model->file());
    if (!tokenizer.ok()) return fail("logits", tokenizer.status());
    ids = tokenizer->encode(f.prompt, true, false);
    if (ids->empty()) return fail("logits", invalid_argument("--prompt tokenizes to nothing"));
    std::fprintf(stderr, "moetier logits: prompt -> %zu tokens\n", ids->size());
  } else {
    ids = parse_ids(f.ids);
    if (!ids.ok()) return fail("logits", ids.status());
  }
  auto session = Sequence::create((*engine)->backend(), static_cast<uint32_t>(ids->size()), *kv_type);
  if (!session.ok()) return fail("logits", session.status());

  std::unique_ptr<FILE, int (*)(FILE*)> routing(nullptr, fclose);
  if (!f.routing.empty()) {
    routing.reset(std::fopen(f.routing.c_str(), "w"));
    if (!routing) return fail("logits", io_error("cannot create '" + f.routing + "'"));
  }
  RoutingWriter writer(routing.get(), f.dump);
  std::vector<float> logits;
  if (!f.dump.empty() && (*engine)->on_gpu()) return fail("logits", unimplemented("--dump: intermediates are dumped by the CPU path only"));
  Status s = session->feed(*ids, true, &logits, routing || !f.dump.empty() ? &writer : nullptr);
  if (!s.ok()) return fail("logits", s);
  std::ofstream out(f.output, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!out) return fail("logits", io_error("cannot write '" + f.output + "'"));
  std::fprintf(stderr, "moetier logits: [%zu x %u] f32 -> %s\n", ids->size(), model->hparams().n_vocab, f.output.c_str());
  return 0;
}

}  // namespace

Runner add_logits(CLI::App& app) {
  auto f = std::make_shared<LogitsFlags>();
  app.add_option("-m,--model", f->model, "GGUF model")->required();
  app.add_option("--ids", f->ids, "comma-separated token ids");
  app.add_option("-p,--prompt", f->prompt, "text to tokenize instead of --ids (BOS added as the vocabulary says)");
  app.add_option("-o,--output", f->output, "raw float32 logits, n_tokens x n_vocab")->required();
  app.add_option("--routing,--record-routing", f->routing, "selected experts per (layer, position) as JSON lines");
  app.add_option("--dump", f->dump, "folder for named intermediates (<name>-<layer>.f32), to diff with llama.cpp");
  app.add_option("-t,--threads", f->threads, "threads (0 = all, the default; more than the hardware threads warns)");
  app.add_flag("--no-interleave", f->no_interleave,
               "keep every weight in the memory map (no interleaved Q4_K/Q6_K copies): less memory, slower");
  app.add_option("--kv-type", f->kv_type, "KV cache type: f16 (default), q8_0, f32");
  add_device_flags(app, &f->device);
  return [f] { return run(*f); };
}

}  // namespace mt::cli
