#include "apps/cli/llama_habits.h"

#include <algorithm>
#include <initializer_list>

namespace mt::cli {
namespace {

enum class Act { kTranslate, kDrop, kRefuse };
enum class Value { kNone, kRequired, kOptionalSwitch };  // kOptionalSwitch: on|off|auto|0|1|true|false

struct Habit {
  std::initializer_list<std::string_view> names;
  Act act;
  Value value;
  std::string_view target;   // kTranslate: the moetier flag; kDrop: the note when switched off
  std::string_view message;  // kRefuse: the pointer to the moetier way
  std::string_view command;  // only for this subcommand ("" = every one)
};

constexpr std::string_view kAttention =
    "attention is always one fused pass here (CPU: scores and softmax per query tile, never an n x n matrix; CUDA: "
    "flash decoding), so it cannot be switched off; ignored";

const Habit kHabits[] = {
    {{"-ngl"}, Act::kTranslate, Value::kRequired, "--ngl", "", ""},
    {{"-ncmoe"}, Act::kTranslate, Value::kRequired, "--n-cpu-moe", "", ""},
    {{"-md", "--model-draft"}, Act::kTranslate, Value::kRequired, "--draft-model", "", "run"},
    {{"--draft", "--draft-n"}, Act::kTranslate, Value::kRequired, "--draft-max", "", "run"},
    {{"-cmoe", "--cpu-moe"}, Act::kRefuse, Value::kNone, "",
     "keeps every expert in host memory; here that is a CPU run (--device cpu), or with --device cuda "
     "--n-cpu-moe N for the experts of the first N layers",
     ""},
    {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"}, Act::kTranslate, Value::kRequired, "--kv-type", "", ""},
    {{"-sys", "--system-prompt"}, Act::kTranslate, Value::kRequired, "--system", "", "run"},
    {{"-np", "--parallel"}, Act::kTranslate, Value::kRequired, "--max-running", "", "serve"},
    {{"--log-disable"}, Act::kTranslate, Value::kNone, "--quiet", "", ""},
    {{"-fa", "--flash-attn"}, Act::kDrop, Value::kOptionalSwitch, kAttention, "", ""},
    {{"-no-cnv", "--no-conversation", "-st", "--single-turn"}, Act::kDrop, Value::kNone, "", "", ""},
    {{"--jinja"}, Act::kDrop, Value::kNone, "", "", ""},
    {{"--no-escape"}, Act::kDrop, Value::kNone, "", "", "run"},
    {{"-cb", "--cont-batching"}, Act::kDrop, Value::kNone, "", "", "serve"},
    {{"-cnv", "--conversation", "-i", "--interactive", "-if", "--interactive-first"}, Act::kRefuse, Value::kNone, "",
     "moetier run answers one prompt (--chat wraps it in the chat template); for a conversation, moetier serve and a "
     "chat client",
     ""},
    {{"-b", "--batch-size", "-ub", "--ubatch-size"}, Act::kRefuse, Value::kNone, "",
     "moetier feeds the whole prompt as one batch and splits the work itself; there is no batch size to set", ""},
    {{"--no-mmap"}, Act::kRefuse, Value::kNone, "",
     "moetier always reads the GGUF through a memory map (Q4_K/Q6_K weights are copied into interleaved memory at "
     "load unless --no-interleave); --mlock keeps the mapped file resident",
     ""},
    {{"-ot", "--override-tensor"}, Act::kRefuse, Value::kNone, "",
     "tensors are not placed one by one here: --n-cpu-moe N keeps the experts of the first N layers in host memory, "
     "--expert-cache SIZE tiers them through a device cache",
     ""},
    {{"-ts", "--tensor-split", "-sm", "--split-mode", "-mg", "--main-gpu"}, Act::kRefuse, Value::kNone, "",
     "moetier runs on one GPU (--device cuda) and tiers the experts between it and host memory (--expert-cache)", ""},
    {{"-nkvo", "--no-kv-offload"}, Act::kRefuse, Value::kNone, "",
     "the KV cache lives with the model: on the GPU with --device cuda, in host memory on the CPU", ""},
    {{"-tb", "--threads-batch"}, Act::kRefuse, Value::kNone, "", "one thread pool serves prompt and generation: -t N", ""},
    {{"-hf", "-hfr", "--hf-repo", "-mu", "--model-url"}, Act::kRefuse, Value::kNone, "",
     "moetier downloads nothing: give a local GGUF with -m FILE", ""},
    {{"-dev", "--list-devices"}, Act::kRefuse, Value::kNone, "", "the device is --device cpu|cuda (moetier info lists what this build has)", ""},
};

bool is_switch_value(std::string_view v) {
  for (std::string_view s : {"on", "off", "auto", "0", "1", "true", "false", "enabled", "disabled"}) {
    if (v == s) return true;
  }
  return false;
}

bool is_off(std::string_view v) { return v == "off" || v == "0" || v == "false" || v == "disabled"; }

// A single dash, then two or more letters (dashes allowed after the first): a word no
// moetier flag is, which CLI11 would read as a one-letter flag with a glued value.
bool looks_like_long_single_dash(std::string_view a) {
  if (a.size() < 3 || a[0] != '-' || a[1] == '-') return false;
  if (!std::isalpha(static_cast<unsigned char>(a[1])) || !std::isalpha(static_cast<unsigned char>(a[2]))) return false;
  return std::all_of(a.begin() + 1, a.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '-'; });
}

// Flags whose value is free text that may start with a dash.
bool takes_text(std::string_view a) {
  for (std::string_view s : {"-p", "--prompt", "--system", "--stop", "-r", "--reverse-prompt"}) {
    if (a == s) return true;
  }
  return false;
}

const Habit* find_habit(std::string_view name, std::string_view command) {
  for (const Habit& h : kHabits) {
    if (!h.command.empty() && h.command != command) continue;
    if (std::find(h.names.begin(), h.names.end(), name) != h.names.end()) return &h;
  }
  return nullptr;
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

StatusOr<Habits> translate_llama_habits(std::vector<std::string> args, std::string_view command) {
  Habits out;
  std::string kv_type;  // -ctk and -ctv must agree: one cache type here
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (i == 0 || (i > 0 && takes_text(args[i - 1]))) {
      out.args.push_back(std::move(a));
      continue;
    }
    std::string value;
    bool has_glued = false;
    if (const size_t eq = a.find('='); eq != std::string::npos && a.size() > 1 && a[0] == '-') {
      value = a.substr(eq + 1);
      a.resize(eq);
      has_glued = true;
    }
    const Habit* h = find_habit(a, command);
    if (h == nullptr) {
      if (looks_like_long_single_dash(a)) {
        return invalid_argument("unknown flag '" + a + "' (moetier's long flags take two dashes; see moetier " +
                                std::string(command.empty() ? "" : std::string(command) + " ") + "--help)");
      }
      out.args.push_back(std::move(args[i]));
      continue;
    }
    const std::string_view name = a;
    if (h->act == Act::kRefuse) return invalid_argument(std::string(name) + " (llama.cpp): " + std::string(h->message));
    if (h->value == Value::kRequired && !has_glued) {
      if (i + 1 >= args.size()) return invalid_argument(std::string(name) + " needs a value");
      value = args[++i];
    }
    if (h->value == Value::kOptionalSwitch && !has_glued && i + 1 < args.size() && is_switch_value(args[i + 1])) {
      value = args[++i];
    }
    if (h->act == Act::kDrop) {
      if (h->value == Value::kOptionalSwitch && is_off(value)) out.notes.push_back(std::string(name) + " " + value + ": " + std::string(h->target));
      continue;
    }
    if (h->target == "--kv-type") {
      if (!kv_type.empty() && kv_type != value) {
        return invalid_argument("-ctk " + kv_type + " and -ctv " + value + ": K and V share one cache type here (--kv-type)");
      }
      if (!kv_type.empty()) continue;
      kv_type = value;
    }
    out.args.emplace_back(h->target);
    if (h->value == Value::kRequired) out.args.push_back(value);
  }
  return out;
}

}  // namespace mt::cli
