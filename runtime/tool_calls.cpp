#include "runtime/tool_calls.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <random>

namespace mt {
namespace {

using json = nlohmann::ordered_json;
using Kind = ReplyPiece::Kind;

constexpr std::string_view kQwenOpen = "<tool_call>", kQwenClose = "</tool_call>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kHStart = "<|start|>", kHChannel = "<|channel|>", kHMessage = "<|message|>";
constexpr std::string_view kHEnds[] = {"<|end|>", "<|call|>", "<|return|>"};

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of s that is a proper prefix of marker.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::optional<json> json_object(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// An XML syntax's value: JSON where it parses as such and the schema does not say string.
json param_value(const ToolSchemas& schemas, std::string_view fn, std::string_view key, std::string_view raw) {
  if (!schemas.is_string_param(fn, key)) {
    json j = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && !j.is_string()) return j;
  }
  return std::string(raw);
}

ToolCall make_call(std::string name, const json& args) { return ToolCall{new_tool_call_id(), std::move(name), dump(args)}; }

// qwen: the body between <tool_call> and </tool_call>.
std::optional<ToolCall> parse_qwen_body(std::string_view body, const ToolSchemas& schemas) {
  body = trim(body);
  if (auto j = json_object(body)) {
    auto name = j->find("name");
    auto args = j->find("arguments");
    if (name == j->end() || !name->is_string()) return std::nullopt;
    if (args == j->end()) return make_call(name->get<std::string>(), json::object());
    if (args->is_string()) {
      auto parsed = json_object(args->get<std::string>());
      if (!parsed) return std::nullopt;
      return make_call(name->get<std::string>(), *parsed);
    }
    if (!args->is_object()) return std::nullopt;
    return make_call(name->get<std::string>(), *args);
  }
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kP = "<parameter=", kPEnd = "</parameter>";
  if (body.substr(0, kFn.size()) != kFn || body.size() < kFnEnd.size() ||
      body.substr(body.size() - kFnEnd.size()) != kFnEnd) {
    return std::nullopt;
  }
  const size_t gt = body.find('>');
  const std::string name(trim(body.substr(kFn.size(), gt - kFn.size())));
  std::string_view rest = trim(body.substr(gt + 1, body.size() - kFnEnd.size() - gt - 1));
  json args = json::object();
  while (!rest.empty()) {
    if (rest.substr(0, kP.size()) != kP) return std::nullopt;
    const size_t key_end = rest.find('>');
    const size_t value_end = rest.find(kPEnd);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) return std::nullopt;
    const std::string key(trim(rest.substr(kP.size(), key_end - kP.size())));
    std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    args[key] = param_value(schemas, name, key, value);
    rest = trim(rest.substr(value_end + kPEnd.size()));
  }
  if (name.empty()) return std::nullopt;
  return make_call(name, args);
}

// glm: "name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>..." between the markers.
std::optional<ToolCall> parse_glm_body(std::string_view body, const ToolSchemas& schemas) {
  constexpr std::string_view kK = "<arg_key>", kKEnd = "</arg_key>", kV = "<arg_value>", kVEnd = "</arg_value>";
  const size_t first = body.find(kK);
  const std::string name(trim(body.substr(0, first)));
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos) return std::nullopt;
  json args = json::object();
  std::string_view rest = first == std::string_view::npos ? std::string_view{} : trim(body.substr(first));
  while (!rest.empty()) {
    const size_t key_end = rest.find(kKEnd);
    if (rest.substr(0, kK.size()) != kK || key_end == std::string_view::npos) return std::nullopt;
    const std::string key(rest.substr(kK.size(), key_end - kK.size()));
    rest = trim(rest.substr(key_end + kKEnd.size()));
    const size_t value_end = rest.find(kVEnd);
    if (rest.substr(0, kV.size()) != kV || value_end == std::string_view::npos) return std::nullopt;
    args[key] = param_value(schemas, name, key, rest.substr(kV.size(), value_end - kV.size()));
    rest = trim(rest.substr(value_end + kVEnd.size()));
  }
  return make_call(name, args);
}

// deepseek: between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>.
std::optional<ToolCall> parse_deepseek_body(std::string_view body) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view name = trim(body.substr(0, sep));
  std::string_view args = trim(body.substr(sep + kDsSep.size()));
  if (name == "function") {  // R1: function<｜tool▁sep｜>name\n```json\n{...}\n```
    const size_t nl = args.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    name = trim(args.substr(0, nl));
    args = trim(args.substr(nl + 1));
    constexpr std::string_view kFence = "```json", kFenceEnd = "```";
    if (args.substr(0, kFence.size()) == kFence) args = args.substr(kFence.size());
    if (args.size() >= kFenceEnd.size() && args.substr(args.size() - kFenceEnd.size()) == kFenceEnd) {
      args.remove_suffix(kFenceEnd.size());
    }
  }
  auto j = json_object(trim(args));
  if (name.empty() || !j) return std::nullopt;
  return make_call(std::string(name), *j);
}

struct Block {
  enum class State { kIncomplete, kMalformed, kCalls } state = State::kIncomplete;
  std::vector<ToolCall> calls;
  size_t end = 0;  // bytes of the block
};

Block read_block(ToolSyntax syntax, std::string_view s, bool final, const ToolSchemas& schemas);

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view ltrim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// deepseek's outer block: the calls up to <｜tool▁calls▁end｜> (at the end of the reply, up
// to the last whole call).
void read_deepseek_calls(std::string_view s, bool final, const ToolSchemas& schemas, Block& b) {
  size_t at = kDsCallsBegin.size();
  for (;;) {
    const std::string_view rest = ltrim(s.substr(at));
    at = s.size() - rest.size();
    if (starts_with(rest, kDsCallBegin)) {
      Block inner = read_block(ToolSyntax::kDeepSeek, rest, final, schemas);
      if (inner.state == Block::State::kIncomplete) return;
      if (inner.state == Block::State::kMalformed) {
        b.state = Block::State::kMalformed;
        b.end = at + inner.end;
        return;
      }
      b.calls.push_back(std::move(inner.calls[0]));
      at += inner.end;
      continue;
    }
    if (!final && (starts_with(kDsCallBegin, rest) || starts_with(kDsCallsEnd, rest))) return;  // may still come
    const bool closed = starts_with(rest, kDsCallsEnd);
    b.state = b.calls.empty() ? Block::State::kMalformed : Block::State::kCalls;
    b.end = closed ? at + kDsCallsEnd.size() : at;
    return;
  }
}

// One block starting at the start of s (which begins with the syntax's opening marker).
// At the end of the reply (final), an unclosed block whose body parses is taken as closed.
Block read_block(ToolSyntax syntax, std::string_view s, bool final, const ToolSchemas& schemas) {
  Block b;
  auto one = [&](std::string_view open, std::string_view close, auto&& parse) {
    const size_t close_at = s.find(close, open.size());
    if (close_at == std::string_view::npos && !final) return;
    const size_t body_end = close_at == std::string_view::npos ? s.size() : close_at;
    auto call = parse(s.substr(open.size(), body_end - open.size()));
    b.state = call ? Block::State::kCalls : Block::State::kMalformed;
    if (call) b.calls.push_back(std::move(*call));
    b.end = close_at == std::string_view::npos ? s.size() : close_at + close.size();
  };
  if (syntax == ToolSyntax::kQwen) {
    one(kQwenOpen, kQwenClose, [&](std::string_view body) { return parse_qwen_body(body, schemas); });
  } else if (syntax == ToolSyntax::kGlm) {
    one(kQwenOpen, kQwenClose, [&](std::string_view body) { return parse_glm_body(body, schemas); });
  } else if (s.substr(0, kDsCallBegin.size()) == kDsCallBegin) {
    one(kDsCallBegin, kDsCallEnd, parse_deepseek_body);
  } else {  // <｜tool▁calls▁begin｜> (call)* <｜tool▁calls▁end｜>
    read_deepseek_calls(s, final, schemas, b);
  }
  return b;
}

std::vector<std::string_view> open_markers(ToolSyntax s) {
  if (s == ToolSyntax::kDeepSeek) return {kDsCallsBegin, kDsCallBegin};
  return {kQwenOpen};
}

void add(std::vector<ReplyPiece>& out, Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != Kind::kToolCall) {
    out.back().text += text;
    return;
  }
  out.push_back(ReplyPiece{kind, std::string(text), {}});
}

}  // namespace

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kNone: return "none";
    case ToolSyntax::kQwen: return "qwen";
    case ToolSyntax::kGlm: return "glm";
    case ToolSyntax::kDeepSeek: return "deepseek";
    case ToolSyntax::kHarmony: return "harmony";
  }
  return "?";
}

ToolSyntax detect_tool_syntax(std::string_view t) {
  auto has = [&](std::string_view m) { return t.find(m) != std::string_view::npos; };
  if (has("<arg_key>") && has("<tool_call>")) return ToolSyntax::kGlm;
  if (has("<tool_call>")) return ToolSyntax::kQwen;
  if (has(kDsCallBegin)) return ToolSyntax::kDeepSeek;
  if (has("<|call|>") && has("to=")) return ToolSyntax::kHarmony;
  return ToolSyntax::kNone;
}

ToolSchemas::ToolSchemas(std::string_view tools_json) {
  json tools = json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (!tools.is_array()) return;
  for (const json& t : tools) {
    const json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) continue;
    const json& params = fn->contains("parameters") ? (*fn)["parameters"] : json();
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) continue;
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
      if (it.value().is_object() && it.value().value("type", json()) == "string") {
        string_params_.emplace_back((*fn)["name"].get<std::string>(), it.key());
      }
    }
  }
}

bool ToolSchemas::is_string_param(std::string_view function, std::string_view param) const {
  return std::any_of(string_params_.begin(), string_params_.end(),
                     [&](const auto& p) { return p.first == function && p.second == param; });
}

ReplyStream::ReplyStream(ToolSyntax syntax, ToolSchemas schemas) : syntax_(syntax), schemas_(std::move(schemas)) {}

std::vector<ReplyPiece> ReplyStream::push(std::string_view text) {
  buf_ += text;
  return scan(false);
}

std::vector<ReplyPiece> ReplyStream::finish() { return scan(true); }

std::vector<ReplyPiece> ReplyStream::scan(bool final) {
  if (syntax_ == ToolSyntax::kHarmony) return scan_harmony(final);
  std::vector<ReplyPiece> out;
  if (syntax_ == ToolSyntax::kNone) {
    add(out, Kind::kContent, buf_);
    buf_.clear();
    return out;
  }
  std::string_view s = buf_;
  while (!s.empty()) {
    size_t at = std::string_view::npos, held = 0;
    for (std::string_view m : open_markers(syntax_)) {
      at = std::min(at, s.find(m));
      held = std::max(held, partial_suffix(s, m));
    }
    if (at == std::string_view::npos) {
      const size_t n = final ? s.size() : s.size() - held;
      add(out, Kind::kContent, s.substr(0, n));
      s.remove_prefix(n);
      break;
    }
    add(out, Kind::kContent, s.substr(0, at));
    s.remove_prefix(at);
    Block b = read_block(syntax_, s, final, schemas_);
    if (b.state == Block::State::kIncomplete) break;
    if (b.state == Block::State::kMalformed) {
      add(out, Kind::kContent, s.substr(0, b.end));
    } else {
      for (ToolCall& c : b.calls) out.push_back(ReplyPiece{Kind::kToolCall, "", std::move(c)});
      calls_ += b.calls.size();
    }
    s.remove_prefix(b.end);
  }
  buf_.erase(0, buf_.size() - s.size());
  return out;
}

namespace {

// Whether s is, or could still become, the start of a harmony header.
bool harmony_header(std::string_view s, bool final) {
  for (std::string_view m : {kHStart, kHChannel, std::string_view(" to="), std::string_view("to="),
                             std::string_view("<|constrain|>")}) {
    if (starts_with(s, m) || (!final && starts_with(m, s))) return true;
  }
  return false;
}

// The word after `key` in a header ("commentary", "functions.get_weather").
std::string header_word(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view w = header.substr(at + key.size());
  return std::string(w.substr(0, w.find_first_of(" <\n")));
}

}  // namespace

std::vector<ReplyPiece> ReplyStream::scan_harmony(bool final) {
  std::vector<ReplyPiece> out;
  std::string_view s = buf_;
  while (!s.empty()) {
    if (plain_ || (!in_body_ && !harmony_header(s, final))) {
      plain_ = true;
      add(out, Kind::kContent, s);
      s = {};
      break;
    }
    if (!in_body_) {
      const size_t msg = s.find(kHMessage);
      if (msg == std::string_view::npos) {
        if (final) add(out, Kind::kContent, s);
        if (final) s = {};
        break;
      }
      const std::string_view header = s.substr(0, msg);
      recipient_ = header_word(header, "to=");
      body_kind_ = starts_with(recipient_, "functions.")       ? Kind::kToolCall
                   : header_word(header, kHChannel) == "analysis" ? Kind::kReasoning
                                                                  : Kind::kContent;
      in_body_ = true;
      s.remove_prefix(msg + kHMessage.size());
      continue;
    }
    size_t end = std::string_view::npos, end_len = 0, held = 0;
    for (std::string_view m : kHEnds) {
      const size_t at = s.find(m);
      if (at < end) {
        end = at;
        end_len = m.size();
      }
      held = std::max(held, partial_suffix(s, m));
    }
    if (end == std::string_view::npos && !final) {
      if (body_kind_ != Kind::kToolCall) {  // a call waits for its end; text goes on now
        add(out, body_kind_, s.substr(0, s.size() - held));
        s.remove_prefix(s.size() - held);
      }
      break;
    }
    const std::string_view body = s.substr(0, std::min(end, s.size()));
    if (body_kind_ != Kind::kToolCall) {
      add(out, body_kind_, body);
    } else if (auto args = json_object(trim(body))) {
      out.push_back(ReplyPiece{Kind::kToolCall, "", make_call(recipient_.substr(10), *args)});
      ++calls_;
    } else {
      add(out, Kind::kContent, body);
    }
    s.remove_prefix(std::min(s.size(), body.size() + end_len));
    in_body_ = false;
  }
  buf_.erase(0, buf_.size() - s.size());
  return out;
}

std::vector<ReplyPiece> parse_reply(ToolSyntax syntax, std::string_view text, const ToolSchemas& schemas) {
  ReplyStream stream(syntax, schemas);
  std::vector<ReplyPiece> pieces = stream.push(text);
  for (ReplyPiece& p : stream.finish()) pieces.push_back(std::move(p));
  std::vector<ReplyPiece> out;
  for (ReplyPiece& p : pieces) {
    if (p.kind == Kind::kToolCall) {
      out.push_back(std::move(p));
    } else {
      add(out, p.kind, p.text);
    }
  }
  return out;
}

std::string call_prefix(ToolSyntax syntax, std::string_view function) {
  const std::string name(function);
  switch (syntax) {
    case ToolSyntax::kQwen: return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ";
    case ToolSyntax::kDeepSeek: return std::string(kDsCallsBegin) + std::string(kDsCallBegin) + name + std::string(kDsSep);
    case ToolSyntax::kHarmony: return "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>";
    case ToolSyntax::kGlm:
    case ToolSyntax::kNone: return "";
  }
  return "";
}

std::string call_suffix(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::kQwen: return "}\n</tool_call>";
    case ToolSyntax::kDeepSeek: return std::string(kDsCallEnd) + std::string(kDsCallsEnd);
    case ToolSyntax::kHarmony: return "<|call|>";
    case ToolSyntax::kGlm:
    case ToolSyntax::kNone: return "";
  }
  return "";
}

std::string any_call_prefix(ToolSyntax syntax) { return syntax == ToolSyntax::kQwen ? "<tool_call>\n" : ""; }

std::string any_call_suffix(ToolSyntax syntax) { return syntax == ToolSyntax::kQwen ? "\n</tool_call>" : ""; }

std::string new_tool_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

}  // namespace mt
