// moetier serve: an OpenAI-compatible HTTP server for one model (server/http.h): chat and
// text completions, streamed or not, from requests batched by the Scheduler; /v1/models,
// /tokenize, /detokenize, /health and Prometheus /metrics. Every flag is checked before the
// server listens (a KV type the backend refuses, an unreadable key file): a bad one is a
// one-line error and exit 1, never a healthy server whose requests all fail. A port in use
// is an error too. SIGINT / SIGTERM stop it gracefully: no new connections, running
// requests get --shutdown-timeout seconds to finish, then streams are ended cleanly; a
// second signal exits at once. --device cuda serves
// from the GPU (its backend evaluates a step's sequences in one pass, cuda/cuda_backend.h). With
// --expert-cache (run's tiering flags) the experts are tiered (the GPU's device cache, or
// the CPU's simulated device) and /metrics reports the cache counters per geometry group.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "apps/cli/commands.h"
#include "apps/cli/engine.h"
#include "apps/cli/model_sizes.h"
#include "apps/cli/tiering_flags.h"
#include "backend/backend.h"
#include "core/log.h"
#include "experts/geometry.h"
#include "experts/stats.h"
#include "server/chat_prompt.h"
#include "server/http.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

struct ServeFlags {
  std::string model, host = "127.0.0.1", api_key, alias, kv_type = "f16";
  std::string chat_template_file;
  std::string api_key_file, cors;
  int port = 8080, threads = 0;
  uint32_t max_running = 8, n_ctx = 0, http_threads = 0;
  uint32_t lookup = 0, draft_max = 8;  // speculative decoding by prompt lookup
  bool mtp = false;                    // or by the model's NextN block
  uint32_t prefill_chunk = 256;
  uint32_t prefill_idle_chunk = 0;  // 0: 4096 on the GPU, --prefill-chunk on the CPU
  uint32_t prefill_min_chunk = 16;
  double prefill_pace = 2.0;
  double gather_ms = -1;  // < 0: 5 on the GPU, 0 on the CPU
  bool no_interleave = false;
  double request_timeout_s = 0, shutdown_timeout_s = 10;
  TieringFlags tiering;
  BankFlags banks;
  DeviceFlags device;
};

std::vector<server::ExpertGroupLabel> expert_groups(const gguf::GgufFile& file) {
  std::vector<server::ExpertGroupLabel> out;
  auto geometry = read_expert_geometry(file);
  if (!geometry.ok()) return out;
  for (const GeometryGroup& g : geometry->groups) out.push_back({server::layer_ranges(g.layers), g.types, g.layers});
  return out;
}

// Blocks the stop signals in this thread and every thread started after it; a watcher
// thread takes them with sigwait and stops the server. finish() ends the watcher with a
// SIGUSR1 of its own (one from outside is ignored).
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a death
  }
  void start(server::HttpServer* http) {
    thread_ = std::thread([this, http] {
      int sig = 0;
      for (bool stopping = false;;) {
        if (sigwait(&set_, &sig) != 0 || (sig == SIGUSR1 && !finishing_)) continue;
        if (sig == SIGUSR1) return;
        if (stopping) {
          std::fprintf(stderr, "moetier serve: second signal %d, exiting now\n", sig);
          std::_Exit(1);
        }
        log_info("serve: signal " + std::to_string(sig) + ", stopping (running requests may finish)");
        http->stop();
        stopping = true;
      }
    });
  }
  // Ends the watcher (before the server it stops goes away).
  void finish() {
    if (!thread_.joinable()) return;
    finishing_ = true;
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }
  ~SignalWatcher() { finish(); }

 private:
  sigset_t set_;
  std::atomic<bool> finishing_{false};
  std::thread thread_;
};

// Memory of finished requests (KV caches, logits, samplers) goes back to the OS. glibc's
// default raises its mmap and trim thresholds after large frees, so those blocks would be
// kept in the scheduler thread's arena and the RSS would stay at its peak; fixing the trim
// threshold keeps the mmap one at 128 KiB (large blocks are mapped and unmapped).
void release_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
#endif
}

// The API key: --api-key, the first line of --api-key-file, or $MOETIER_API_KEY (in that
// order; a key on the command line is visible to every user in `ps`).
StatusOr<std::string> api_key(const ServeFlags& f) {
  if (!f.api_key.empty() && !f.api_key_file.empty()) return invalid_argument("give --api-key or --api-key-file, not both");
  std::string key = f.api_key;
  if (!f.api_key_file.empty()) {
    std::ifstream in(f.api_key_file);
    if (!in) return not_found("--api-key-file: cannot read '" + f.api_key_file + "'");
    std::getline(in, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.empty()) return invalid_argument("--api-key-file: the first line of '" + f.api_key_file + "' is empty");
  } else if (key.empty()) {
    if (const char* env = std::getenv("MOETIER_API_KEY")) key = env;
  }
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return invalid_argument("the API key contains a control character");
  }
  return key;
}

// The flags that need no model: checked before the (slow) load.
Status check_flags(const ServeFlags& f, QuantType* kv_type) {
  auto kv = type_from_name(f.kv_type);
  if (!kv) return invalid_argument("--kv-type: unknown type '" + f.kv_type + "' (f16, q8_0 or f32)");
  if (*kv != QuantType::F16 && *kv != QuantType::Q8_0 && *kv != QuantType::F32) {
    return invalid_argument("--kv-type " + f.kv_type + ": the KV cache can be f16, q8_0 or f32");
  }
  *kv_type = *kv;
  if (f.max_running == 0) return invalid_argument("--max-running must be >= 1");
  if (f.draft_max < 1 || f.draft_max > 64) return invalid_argument("--draft-max must be in [1, 64]");
  if (f.prefill_chunk < 1 || f.prefill_chunk > 65536) return invalid_argument("--prefill-chunk must be in [1, 65536]");
  if (f.prefill_idle_chunk > 65536) return invalid_argument("--prefill-idle-chunk must be at most 65536");
  if (f.prefill_min_chunk < 1 || f.prefill_min_chunk > 65536) return invalid_argument("--prefill-min-chunk must be in [1, 65536]");
  if (!(f.gather_ms <= 1000)) return invalid_argument("--gather-ms must be in [0, 1000]");
  if (!(f.prefill_pace == 0 || (f.prefill_pace >= 1.1 && f.prefill_pace <= 100))) {
    return invalid_argument("--prefill-pace must be 0 (off) or in [1.1, 100]");
  }
  if (f.cors.find_first_of(" \t\r\n,") != std::string::npos) {
    return invalid_argument("--cors: one origin (https://example.com) or *");
  }
  return {};
}

// Raises the soft limit on open files to the hard one: each connection is a descriptor.
void raise_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

int serve(const ServeFlags& f) {
  SignalWatcher signals;
  release_freed_memory();
  raise_file_limit();
  QuantType kv_type = QuantType::F16;
  if (Status st = check_flags(f, &kv_type); !st.ok()) return fail("serve", st);
  auto key = api_key(f);
  if (!key.ok()) return fail("serve", key.status());
  const bool tiered = !f.tiering.expert_cache.empty();
  auto engine = Engine::load(f.model, f.threads, !f.no_interleave, f.device, tiered);  // outlives the scheduler
  if (!engine.ok()) return fail("serve", engine.status());
  const Model& model = (*engine)->model();
  const HParams& hp = model.hparams();
  auto tokenizer = Tokenizer::from_gguf(model.file());
  if (!tokenizer.ok()) return fail("serve", tokenizer.status());
  if (tokenizer->n_vocab() != hp.n_vocab) return fail("serve", data_loss("tokenizer and model disagree on the vocabulary size"));
  auto chat_prompt = ChatPrompt::load(model.file(), *tokenizer, f.chat_template_file);
  if (!chat_prompt.ok()) return fail("serve", chat_prompt.status());
  const ChatPrompt& chat = *chat_prompt;

  ServingOptions options;
  options.max_running = f.max_running;
  options.n_ctx = f.n_ctx ? f.n_ctx : std::min<uint32_t>(hp.n_ctx_train ? hp.n_ctx_train : 4096, 4096);
  options.kv_type = kv_type;
  options.lookup_ngram = f.lookup;
  options.nextn = f.mtp;
  if (f.mtp && f.lookup > 0) return fail("serve", invalid_argument("give one drafter: --lookup or --mtp"));
  if (f.mtp && (*engine)->on_gpu()) {
    return fail("serve", unimplemented("--mtp on --device cuda: the NextN (MTP) block runs on the CPU backend only for now"));
  }
  if (f.mtp) {
    if (Status n = model.nextn_status(); !n.ok()) return fail("serve", n);
  }
  options.prefill_chunk = f.prefill_chunk;
  options.prefill_pace = f.prefill_pace;
  options.prefill_min_chunk = f.prefill_min_chunk;
  // On a GPU a step of many prompt tokens costs little more than one of a few (the experts
  // are read either way): while nothing decodes, a crowd's prompts go in at once, and
  // requests sent together are gathered for a moment so that they start together.
  const bool gpu = (*engine)->on_gpu();
  options.prefill_idle_chunk = f.prefill_idle_chunk > 0 ? f.prefill_idle_chunk : (gpu ? std::max(4096u, f.prefill_chunk) : 0);
  const double gather_ms = f.gather_ms >= 0 ? f.gather_ms : (gpu ? 5.0 : 0.0);
  options.gather = std::chrono::microseconds(static_cast<int64_t>(gather_ms * 1000));
  // The host samples while the GPU idles: its cores are free then (on the CPU the forward
  // pass's threads are the same cores, and sampling stays on the scheduler's thread).
  if (gpu) options.sampling_threads = std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
  options.draft_max = f.draft_max;
  if (auto sizes = read_model_sizes(model.file()); sizes.ok()) {  // /metrics' KV bytes in use
    options.kv_bytes_per_token = kv_type == QuantType::Q8_0 ? sizes->kv_bytes_per_token_q8_0
                                                            : sizes->kv_bytes_per_token_f16 * (kv_type == QuantType::F32 ? 2 : 1);
    options.kv_bytes_per_sequence = sizes->state_bytes_per_seq;
  }
  std::string tiering_note;
  if (tiered) {
    auto r = resolve_tiering(model.file(), f.tiering, f.banks, (*engine)->on_gpu());
    if (!r.ok()) return fail("serve", r.status());
    const TieringSetup* setup = &r->setup;
    if (Status st = (*engine)->enable_tiering(r->setup, r->banks); !st.ok()) return fail("serve", st);
    options.experts = (*engine)->tiering_scheduler();
    tiering_note = "; experts tiered (" + f.tiering.moe_mode + ", " + cache_policy_name(setup->policy) + ", cache " +
                   human_bytes(setup->budget) + ")";
  }
  {
    // What every request will do first, done once now: a KV type or context the backend
    // refuses fails here, not in each request.
    Status trial;
    try {
      trial = Sequence::create((*engine)->backend(), options.n_ctx, kv_type).status();
    } catch (const std::bad_alloc&) {
      trial = out_of_range("not enough memory for one request's KV cache");
    }
    if (!trial.ok()) {
      return fail("serve", invalid_argument("--kv-type " + f.kv_type + ", --ctx-size " + std::to_string(options.n_ctx) +
                                            ": " + trial.message()));
    }
  }
  Scheduler scheduler((*engine)->backend(), *tokenizer, options);

  server::HttpOptions http_options;
  http_options.host = f.host;
  http_options.port = f.port;
  http_options.model_name = f.alias.empty() ? std::filesystem::path(f.model).stem().string() : f.alias;
  http_options.api_key = *key;
  http_options.cors_origin = f.cors;
  http_options.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout_s * 1000.0));
  http_options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.request_timeout_s * 1000.0));
  http_options.threads = f.http_threads ? f.http_threads : 4;
  http_options.expert_groups = expert_groups(model.file());
  server::HttpServer http(scheduler, *tokenizer, chat, http_options);
  auto port = http.bind();
  if (!port.ok()) return fail("serve", port.status());
  signals.start(&http);
  std::fprintf(stderr,
               "moetier serve: model '%s' (%s, %u layers, %u experts top-%u) on %s; context %u per "
               "request, up to %u running; chat format %s%s\n",
               http_options.model_name.c_str(), std::string(arch_info(hp.arch).name).c_str(), hp.n_layer, hp.n_expert,
               hp.n_expert_used, (*engine)->describe().c_str(), options.n_ctx, options.max_running,
               chat.description().c_str(), tiering_note.c_str());
  if (f.mtp) {
    std::fprintf(stderr, "moetier serve: speculative decoding by the model's NextN (MTP) block (up to %u guesses a step)\n",
                 f.draft_max);
  }
  if (f.lookup > 0) {
    std::fprintf(stderr, "moetier serve: speculative decoding by prompt lookup (n-grams %u down to 1, up to %u guesses a step)\n",
                 f.lookup, f.draft_max);
  }
  std::fprintf(stderr, "moetier serve: listening on http://%s:%d\n", f.host.c_str(), *port);
  std::fflush(stderr);
  http.run();
  signals.finish();
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  app.add_option("-m,--model", f->model, "GGUF model")->required();
  app.add_option("--host", f->host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", f->port, "port (default 8080; 0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-running", f->max_running, "requests decoded together (default 8)");
  app.add_option("--lookup", f->lookup,
                 "speculative decoding by prompt lookup: each step also evaluates up to --draft-max guesses (what "
                 "followed the last earlier occurrence of the text's last N, down to 1, tokens); 0 = off");
  app.add_flag("--mtp", f->mtp,
               "speculative decoding by the model's own NextN (MTP) block (files that carry one; CPU): each step also "
               "evaluates up to --draft-max of its guesses");
  app.add_option("--draft-max", f->draft_max, "most guesses per choice and step with --lookup or --mtp (default 8)");
  app.add_option("--prefill-chunk", f->prefill_chunk,
                 "most prompt tokens evaluated per step, all prompts together (default 256)");
  app.add_option("--prefill-idle-chunk", f->prefill_idle_chunk,
                 "most prompt tokens per step while no request decodes (default 4096 on the GPU, --prefill-chunk "
                 "on the CPU)");
  app.add_option("--prefill-min-chunk", f->prefill_min_chunk,
                 "the smallest prompt chunk beside decoding requests (default 16, at most --prefill-chunk; the sizes tried are it x 2^k)");
  app.add_option("--gather-ms", f->gather_ms,
                 "an idle server given a request waits up to MS for others sent with it, so they start together "
                 "(default 5 on the GPU, 0 on the CPU; ends early at --max-running requests)");
  app.add_option("--prefill-pace", f->prefill_pace,
                 "beside decoding requests, prompt chunks sized so a step lasts about R x a plain decode step "
                 "(measured; default 2; 0 = always --prefill-chunk)");
  app.add_option("-c,--ctx,--ctx-size", f->n_ctx, "context per request (default: min(training context, 4096))");
  app.add_option("--api-key", f->api_key,
                 "require 'Authorization: Bearer KEY' (all routes but /health); default $MOETIER_API_KEY");
  app.add_option("--api-key-file", f->api_key_file, "read the API key from the first line of FILE (not visible in ps)");
  app.add_option("--cors", f->cors, "allow browser pages from ORIGIN (or *) to call the API: CORS headers and preflight");
  app.add_option("--shutdown-timeout", f->shutdown_timeout_s,
                 "seconds running requests may finish after SIGTERM/SIGINT before streams are cut (default 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--request-timeout", f->request_timeout_s,
                 "seconds a request may run before it ends with finish_reason \"timeout\" (default 0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--alias", f->alias, "the model name clients use (default: the file name without .gguf)");
  app.add_option("-t,--threads", f->threads, "compute threads (default: all)");
  app.add_option("--http-threads", f->http_threads,
                 "threads that parse, render and tokenize requests (default 4); connections need none");
  app.add_option("--kv-type", f->kv_type, "KV cache type: f16 (default), q8_0, f32");
  app.add_option("--chat-template-file", f->chat_template_file, "Jinja chat template to use instead of the model's");
  app.add_flag("--no-interleave", f->no_interleave, "keep every weight in the memory map (less memory, slower)");
  add_device_flags(app, &f->device);
  add_tiering_flags(app, &f->tiering);
  add_bank_flags(app, &f->banks);
  return [f] { return serve(*f); };
}

}  // namespace mt::cli
