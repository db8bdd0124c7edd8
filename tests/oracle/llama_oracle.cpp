// llama_oracle: run llama.cpp (the prebuilt libraries of node-llama-cpp, CPU only) on a list of
// token ids in one batch and dump what moetier is compared against:
//   * raw float32 logits of every position  (-o FILE: n_tokens x n_vocab, row-major, little-endian)
//   * per layer and position the selected experts and their routing weights (--routing FILE,
//     JSON lines), read from llama.cpp's graph through the cb_eval callback.
//
// usage: llama_oracle -m FILE.gguf --ids 1,2,3 -o logits.f32 [--routing routing.jsonl]
//                     [-t THREADS] [--kv-type f16|f32] [--list-tensors] [-v]
//
// The folder holding the ggml backend libraries (libggml-cpu-*.so) is compiled in
// (LLAMA_ORACLE_BINS_DIR) and can be overridden with the environment variable LLAMA_ORACLE_BINS.

#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <thread>
#include <vector>

#ifndef LLAMA_ORACLE_BINS_DIR
#define LLAMA_ORACLE_BINS_DIR ""
#endif

static_assert(std::endian::native == std::endian::little, "the logits file is written in native byte order");

namespace {

struct Options {
    std::string model;
    std::string ids_arg;
    bool have_ids = false;
    std::string logits_out;
    std::string routing_out;
    int threads = 0;
    ggml_type kv_type = GGML_TYPE_F16;
    bool list_tensors = false;
    bool verbose = false;
    std::string dump_dir;  // --dump DIR: every f32 graph tensor "<name>-<layer>" as DIR/<name>-<layer>.f32
};

[[noreturn]] void fail(const std::string & msg) {
    std::fprintf(stderr, "llama_oracle: error: %s\n", msg.c_str());
    std::exit(1);
}

void usage(FILE * f) {
    std::fprintf(f,
        "usage: llama_oracle -m FILE.gguf --ids 1,2,3 -o logits.f32 [--routing routing.jsonl]\n"
        "                    [-t THREADS] [--kv-type f16|f32] [--list-tensors] [-v]\n"
        "  -m FILE          GGUF model (loaded on the CPU)\n"
        "  --ids LIST       comma-separated token ids, decoded in one batch (positions 0..n-1)\n"
        "  -o FILE          raw float32 logits of every position: n_tokens x n_vocab, row-major, LE\n"
        "  --routing FILE   JSON lines {\"layer\":L,\"pos\":P,\"experts\":[...],\"weights\":[...]}\n"
        "  -t N             threads (default: all hardware threads)\n"
        "  --kv-type T      KV cache type, f16 (llama.cpp default) or f32\n"
        "  --list-tensors   print every graph tensor of the decode (name type ne op) to stdout\n"
        "  --dump DIR       write every f32 graph tensor named <name>-<layer> to DIR/<name>-<layer>.f32\n"
        "  -v               show llama.cpp's info log\n"
        "env LLAMA_ORACLE_BINS overrides the ggml backend folder (compiled in: %s)\n",
        LLAMA_ORACLE_BINS_DIR);
}

std::vector<int64_t> parse_ids(const std::string & s) {
    std::vector<int64_t> ids;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        std::string tok = s.substr(i, j - i);
        // trim spaces
        while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t')) tok.erase(tok.begin());
        while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t')) tok.pop_back();
        if (tok.empty()) fail("bad --ids: empty element in '" + s + "'");
        errno = 0;
        char * end = nullptr;
        long long v = std::strtoll(tok.c_str(), &end, 10);
        if (errno != 0 || end == nullptr || *end != '\0') fail("bad --ids: '" + tok + "' is not an integer");
        ids.push_back(v);
        i = j + 1;
        if (j == s.size() - 1) fail("bad --ids: trailing comma in '" + s + "'");
    }
    return ids;
}

Options parse_args(int argc, char ** argv) {
    Options o;
    auto need = [&](int & i) -> std::string {
        if (i + 1 >= argc) fail(std::string("option ") + argv[i] + " needs a value");
        return argv[++i];
    };
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "-m" || a == "--model") o.model = need(i);
        else if (a == "--ids") { o.ids_arg = need(i); o.have_ids = true; }
        else if (a == "-o" || a == "--logits") o.logits_out = need(i);
        else if (a == "--routing") o.routing_out = need(i);
        else if (a == "-t" || a == "--threads") {
            std::string v = need(i);
            char * end = nullptr;
            long t = std::strtol(v.c_str(), &end, 10);
            if (*end != '\0' || t < 1 || t > 1024) fail("bad thread count '" + v + "'");
            o.threads = static_cast<int>(t);
        } else if (a == "--kv-type") {
            std::string v = need(i);
            if (v == "f16") o.kv_type = GGML_TYPE_F16;
            else if (v == "f32") o.kv_type = GGML_TYPE_F32;
            else fail("bad --kv-type '" + v + "' (f16 or f32)");
        } else if (a == "--list-tensors") o.list_tensors = true;
        else if (a == "--dump" && i + 1 < argc) o.dump_dir = argv[++i];
        else if (a == "-v" || a == "--verbose") o.verbose = true;
        else if (a == "-h" || a == "--help") { usage(stdout); std::exit(0); }
        else { usage(stderr); fail("unknown argument '" + std::string(a) + "'"); }
    }
    if (o.model.empty()) { usage(stderr); fail("missing -m FILE.gguf"); }
    if (!o.have_ids) { usage(stderr); fail("missing --ids"); }
    if (o.logits_out.empty() && o.routing_out.empty() && !o.list_tensors && o.dump_dir.empty()) {
        usage(stderr);
        fail("nothing to do: give -o, --routing or --list-tensors");
    }
    if (o.threads == 0) {
        unsigned hc = std::thread::hardware_concurrency();
        o.threads = hc == 0 ? 1 : static_cast<int>(hc);
    }
    return o;
}

// ---- log filter: llama.cpp is chatty; keep warnings and errors unless -v ----
struct LogState {
    bool verbose = false;
    ggml_log_level last = GGML_LOG_LEVEL_NONE;
};
LogState g_log;

void log_cb(ggml_log_level level, const char * text, void * /*user*/) {
    // GGML_LOG_LEVEL_CONT continues the previous message at its level
    if (level != GGML_LOG_LEVEL_CONT) g_log.last = level;
    ggml_log_level eff = g_log.last;
    if (g_log.verbose || eff == GGML_LOG_LEVEL_WARN || eff == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

// ---- routing capture through cb_eval ----
struct Captured {
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};
    std::vector<float> f;      // for F32 tensors
    std::vector<int32_t> i;    // for I32 tensors
};

struct Capture {
    bool active = false;
    bool want_routing = false;
    bool list = false;
    std::string dump_dir;
    // key: (kind, layer) -> one entry per ubatch, in order of computation
    std::map<int, std::vector<Captured>> topk;          // layer -> ubatches
    std::map<int, std::vector<Captured>> weights;       // ffn_moe_weights
    std::map<int, std::vector<Captured>> weights_norm;  // ffn_moe_weights_norm
    std::map<int, std::vector<Captured>> probs;         // ffn_moe_probs (every expert's score)
    std::map<int, std::vector<Captured>> probs_biased;  // ffn_moe_probs_biased (selection scores, exp_probs_b)
    std::map<int, std::vector<Captured>> weights_scaled;  // ffn_moe_weights_scaled (expert_weights_scale)
    std::string error;
};

// "ffn_moe_topk-12" -> ("ffn_moe_topk", 12); returns false when there is no "-<int>" suffix
bool split_name(const char * name, std::string & base, int & layer) {
    std::string_view s(name);
    size_t dash = s.rfind('-');
    if (dash == std::string_view::npos || dash + 1 >= s.size()) return false;
    int v = 0;
    for (size_t k = dash + 1; k < s.size(); ++k) {
        char c = s[k];
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    base.assign(s.substr(0, dash));
    layer = v;
    return true;
}

enum class Kind { none, topk, weights, weights_norm, weights_scaled, probs, probs_biased };

Kind kind_of(const ggml_tensor * t, int & layer) {
    std::string base;
    if (!split_name(t->name, base, layer)) return Kind::none;
    if (base == "ffn_moe_topk") return Kind::topk;
    if (base == "ffn_moe_weights") return Kind::weights;
    // gpt-oss: the softmax over the selected logits (it has no renormalisation step)
    if (base == "ffn_moe_weights_norm" || base == "ffn_moe_weights_softmax") return Kind::weights_norm;
    if (base == "ffn_moe_probs") return Kind::probs;
    if (base == "ffn_moe_probs_biased") return Kind::probs_biased;
    if (base == "ffn_moe_weights_scaled") return Kind::weights_scaled;
    return Kind::none;
}

// Copy a (possibly strided, e.g. a view) backend tensor into a dense vector in logical order.
template <typename T>
std::vector<T> read_tensor(const ggml_tensor * t) {
    const int64_t n = ggml_nelements(t);
    std::vector<T> out(static_cast<size_t>(n));
    const size_t es = sizeof(T);
    T * dst = out.data();
    const bool row_dense = t->nb[0] == es;
    std::vector<T> tmp;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
                const size_t off = static_cast<size_t>(i1) * t->nb[1] + static_cast<size_t>(i2) * t->nb[2] +
                                   static_cast<size_t>(i3) * t->nb[3];
                if (row_dense) {
                    ggml_backend_tensor_get(t, dst, off, static_cast<size_t>(t->ne[0]) * es);
                    dst += t->ne[0];
                } else {
                    for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                        ggml_backend_tensor_get(t, dst, off + static_cast<size_t>(i0) * t->nb[0], es);
                        ++dst;
                    }
                }
            }
        }
    }
    return out;
}

bool eval_cb(ggml_tensor * t, bool ask, void * user) {
    auto * cap = static_cast<Capture *>(user);
    if (!cap->active) return ask ? false : true;
    int layer = -1;
    Kind k = cap->want_routing ? kind_of(t, layer) : Kind::none;
    if (ask) {
        if (cap->list) {
            std::printf("%-32s %-5s ne=[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] op=%s\n", t->name,
                        ggml_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3], ggml_op_desc(t));
        }
        return k != Kind::none || (!cap->dump_dir.empty() && t->type == GGML_TYPE_F32);
    }
    if (!cap->dump_dir.empty() && t->type == GGML_TYPE_F32) {
        std::string base;
        int l = -1;
        if (split_name(t->name, base, l) && std::strchr(t->name, ' ') == nullptr) {
            // rows of ne[0] floats, appended per ubatch, in logical order
            std::vector<float> data = read_tensor<float>(t);
            std::string path = cap->dump_dir + "/" + t->name + ".f32";
            if (FILE * df = std::fopen(path.c_str(), "ab")) {
                std::fwrite(data.data(), sizeof(float), data.size(), df);
                std::fclose(df);
            }
        }
    }
    // ask == false: data of t is ready. Returning false would abort the graph computation.
    if (k == Kind::none) return true;
    Captured c;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) c.ne[d] = t->ne[d];
    if (k == Kind::topk) {
        if (t->type != GGML_TYPE_I32) {
            cap->error = std::string("tensor ") + t->name + " has type " + ggml_type_name(t->type) + ", expected i32";
            return true;
        }
        c.i = read_tensor<int32_t>(t);
        cap->topk[layer].push_back(std::move(c));
    } else {
        if (t->type != GGML_TYPE_F32) {
            cap->error = std::string("tensor ") + t->name + " has type " + ggml_type_name(t->type) + ", expected f32";
            return true;
        }
        c.f = read_tensor<float>(t);
        auto& dst = k == Kind::weights          ? cap->weights
                    : k == Kind::probs          ? cap->probs
                    : k == Kind::probs_biased   ? cap->probs_biased
                    : k == Kind::weights_scaled ? cap->weights_scaled
                                                : cap->weights_norm;
        dst[layer].push_back(std::move(c));
    }
    return true;
}

bool file_exists(const std::string & p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string fmt_float(float v) {
    if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
    return buf;
}

void write_routing(const Options & o, const Capture & cap, int64_t n_tokens, int32_t n_layer) {
    if (!cap.error.empty()) fail(cap.error);
    if (cap.topk.empty()) {
        fail("--routing: no ffn_moe_topk-<layer> tensor was seen in the graph (not an MoE model?); "
             "use --list-tensors to see the graph's tensor names");
    }
    FILE * f = std::fopen(o.routing_out.c_str(), "wb");
    if (!f) fail("cannot open " + o.routing_out + " for writing: " + std::strerror(errno));
    int n_norm = 0, n_raw = 0;
    for (const auto & [layer, ubs] : cap.topk) {
        if (layer < 0 || layer >= n_layer) fail("routing tensor for layer " + std::to_string(layer) + " out of range");
        const std::vector<Captured> * wsrc = nullptr;
        if (auto it = cap.weights_scaled.find(layer); it != cap.weights_scaled.end()) { wsrc = &it->second; ++n_norm; }
        else if (auto it1 = cap.weights_norm.find(layer); it1 != cap.weights_norm.end()) { wsrc = &it1->second; ++n_norm; }
        else if (auto it2 = cap.weights.find(layer); it2 != cap.weights.end()) { wsrc = &it2->second; ++n_raw; }
        if (!wsrc) fail("no routing weights tensor (ffn_moe_weights[_norm]) for layer " + std::to_string(layer));
        if (wsrc->size() != ubs.size()) fail("routing: topk and weights counts differ in layer " + std::to_string(layer));
        const std::vector<Captured> * psrc = nullptr;
        // Near ties are judged on the scores that chose: the biased ones where there is a bias.
        if (auto it = cap.probs_biased.find(layer); it != cap.probs_biased.end() && it->second.size() == ubs.size()) psrc = &it->second;
        else if (auto it1 = cap.probs.find(layer); it1 != cap.probs.end() && it1->second.size() == ubs.size()) psrc = &it1->second;
        int64_t pos0 = 0;
        for (size_t u = 0; u < ubs.size(); ++u) {
            const Captured & tk = ubs[u];
            const Captured & w = (*wsrc)[u];
            const int64_t k = tk.ne[0];
            const int64_t rows = static_cast<int64_t>(tk.i.size()) / (k > 0 ? k : 1);
            if (static_cast<int64_t>(w.f.size()) != rows * k) {
                fail("routing: layer " + std::to_string(layer) + ": " + std::to_string(w.f.size()) +
                     " weights for " + std::to_string(rows) + " x " + std::to_string(k) + " experts");
            }
            for (int64_t r = 0; r < rows; ++r) {
                std::string line = "{\"layer\": " + std::to_string(layer) + ", \"pos\": " + std::to_string(pos0 + r) +
                                   ", \"experts\": [";
                for (int64_t e = 0; e < k; ++e) {
                    if (e) line += ", ";
                    line += std::to_string(tk.i[static_cast<size_t>(r * k + e)]);
                }
                line += "], \"weights\": [";
                for (int64_t e = 0; e < k; ++e) {
                    if (e) line += ", ";
                    line += fmt_float(w.f[static_cast<size_t>(r * k + e)]);
                }
                line += "]";
                if (psrc) {
                    // every expert's router score (ffn_moe_probs), to judge near ties
                    const Captured & p = (*psrc)[u];
                    const int64_t n_expert = p.ne[0];
                    if (static_cast<int64_t>(p.f.size()) >= (r + 1) * n_expert) {
                        line += ", \"probs\": [";
                        for (int64_t e = 0; e < n_expert; ++e) {
                            if (e) line += ", ";
                            line += fmt_float(p.f[static_cast<size_t>(r * n_expert + e)]);
                        }
                        line += "]";
                    }
                }
                line += "}\n";
                std::fputs(line.c_str(), f);
            }
            pos0 += rows;
        }
        if (pos0 != n_tokens) {
            std::fprintf(stderr,
                         "llama_oracle: note: layer %d routed %" PRId64 " of %" PRId64
                         " positions (llama.cpp computes only the rows it outputs)\n",
                         layer, pos0, n_tokens);
        }
    }
    if (std::fclose(f) != 0) fail("error writing " + o.routing_out);
    std::fprintf(stderr, "llama_oracle: routing: %zu MoE layers, weights from %s -> %s\n", cap.topk.size(),
                 n_norm && !n_raw ? "ffn_moe_weights_norm" : (!n_norm ? "ffn_moe_weights" : "mixed"),
                 o.routing_out.c_str());
}

}  // namespace

int main(int argc, char ** argv) {
    Options o = parse_args(argc, argv);
    g_log.verbose = o.verbose;

    std::vector<int64_t> ids64 = parse_ids(o.ids_arg);
    if (ids64.empty()) fail("empty --ids: give at least one token id");
    if (!file_exists(o.model)) fail("model file not found: " + o.model);

    llama_log_set(log_cb, nullptr);

    const char * env_bins = std::getenv("LLAMA_ORACLE_BINS");
    std::string bins = (env_bins && *env_bins) ? env_bins : LLAMA_ORACLE_BINS_DIR;
    if (bins.empty()) fail("no ggml backend folder: set LLAMA_ORACLE_BINS");
    ggml_backend_load_all_from_path(bins.c_str());
    if (ggml_backend_dev_count() == 0) fail("no ggml backend could be loaded from " + bins);
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu_dev) fail("no CPU backend found in " + bins);
    if (o.verbose) std::fprintf(stderr, "llama_oracle: CPU backend: %s\n", ggml_backend_dev_description(cpu_dev));

    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    ggml_backend_dev_t no_devices[1] = {nullptr};  // no offload devices: everything on the CPU
    mp.devices = no_devices;
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) fail("llama.cpp failed to load model " + o.model);

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const int32_t n_layer = llama_model_n_layer(model);
    const int64_t n_tokens = static_cast<int64_t>(ids64.size());
    std::fprintf(stderr, "llama_oracle: n_vocab %d, n_tokens %" PRId64 ", n_layer %d, threads %d\n", n_vocab,
                 n_tokens, n_layer, o.threads);

    std::vector<llama_token> ids;
    ids.reserve(ids64.size());
    for (size_t i = 0; i < ids64.size(); ++i) {
        if (ids64[i] < 0 || ids64[i] >= n_vocab) {
            llama_model_free(model);
            fail("bad token id " + std::to_string(ids64[i]) + " at index " + std::to_string(i) +
                 ": out of vocab range [0, " + std::to_string(n_vocab) + ")");
        }
        ids.push_back(static_cast<llama_token>(ids64[i]));
    }
    const int32_t n_ctx_train = llama_model_n_ctx_train(model);
    if (n_ctx_train > 0 && n_tokens > n_ctx_train) {
        std::fprintf(stderr, "llama_oracle: warning: %" PRId64 " tokens exceed the training context %d\n", n_tokens,
                     n_ctx_train);
    }

    Capture cap;
    cap.want_routing = !o.routing_out.empty();
    cap.list = o.list_tensors;
    cap.dump_dir = o.dump_dir;

    llama_context_params cp = llama_context_default_params();
    const uint32_t n = static_cast<uint32_t>(n_tokens);
    cp.n_ctx = std::max<uint32_t>(n, 16);
    cp.n_batch = n;       // the whole sequence in one llama_decode call ...
    cp.n_ubatch = n;      // ... and in one graph evaluation
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = o.kv_type;
    cp.type_v = o.kv_type;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;
    if (cap.want_routing || cap.list || !cap.dump_dir.empty()) {
        cp.cb_eval = eval_cb;
        cp.cb_eval_user_data = &cap;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        llama_model_free(model);
        fail("llama.cpp failed to create a context");
    }

    llama_batch batch = llama_batch_init(static_cast<int32_t>(n_tokens), 0, 1);
    for (int64_t i = 0; i < n_tokens; ++i) {
        batch.token[i] = ids[static_cast<size_t>(i)];
        batch.pos[i] = static_cast<llama_pos>(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;  // logits at every position
    }
    batch.n_tokens = static_cast<int32_t>(n_tokens);

    cap.active = true;
    const int32_t rc = llama_decode(ctx, batch);
    cap.active = false;
    if (rc != 0) fail("llama_decode failed with code " + std::to_string(rc));

    if (!o.logits_out.empty()) {
        FILE * f = std::fopen(o.logits_out.c_str(), "wb");
        if (!f) fail("cannot open " + o.logits_out + " for writing: " + std::strerror(errno));
        for (int64_t i = 0; i < n_tokens; ++i) {
            const float * row = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
            if (!row) fail("no logits for position " + std::to_string(i));
            if (std::fwrite(row, sizeof(float), static_cast<size_t>(n_vocab), f) != static_cast<size_t>(n_vocab)) {
                fail("error writing " + o.logits_out);
            }
        }
        if (std::fclose(f) != 0) fail("error writing " + o.logits_out);
        std::fprintf(stderr, "llama_oracle: logits [%" PRId64 " x %d] f32 -> %s\n", n_tokens, n_vocab,
                     o.logits_out.c_str());
    }
    if (cap.want_routing) write_routing(o, cap, n_tokens, n_layer);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
