#include "server/http.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <ctime>

#include "core/log.h"
#include "server/http_generate.h"
#include "server/http_loop.h"

namespace mt::server {

namespace {

using json = nlohmann::json;

struct Route {
  const char* path;
  bool prefix;  // path is a prefix followed by one more segment ("/v1/models/{id}")
  const char* method;
  const char* label;  // in /metrics
};
const Route kRoutes[] = {{"/v1/chat/completions", false, "POST", "/v1/chat/completions"},
                         {"/v1/completions", false, "POST", "/v1/completions"},
                         {"/v1/models", false, "GET", "/v1/models"},
                         {"/v1/models/", true, "GET", "/v1/models/{id}"},
                         {"/tokenize", false, "POST", "/tokenize"},
                         {"/detokenize", false, "POST", "/detokenize"},
                         {"/health", false, "GET", "/health"},
                         {"/metrics", false, "GET", "/metrics"}};

const Route* find_route(std::string_view path) {
  for (const Route& r : kRoutes) {
    const std::string_view p = r.path;
    if (r.prefix ? path.size() > p.size() && path.substr(0, p.size()) == p : path == p) return &r;
  }
  return nullptr;
}

// HEAD is GET without the body.
bool method_fits(const Route& r, std::string_view method) {
  return method == r.method || (method == "HEAD" && std::string_view(r.method) == "GET");
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse json_response(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

ApiError unauthorized() {
  return {401, "invalid_request_error", "Incorrect or missing API key (Authorization: Bearer KEY)", "",
          "invalid_api_key"};
}

ApiError payload_too_large(size_t limit) {
  return {413, "invalid_request_error",
          "The request body is larger than the limit of " + std::to_string(limit) + " bytes", "", "payload_too_large"};
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size() || b.empty();
  for (size_t i = 0; i < a.size() && !b.empty(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % b.size()]);
  return diff == 0;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// A boolean field of a request object: *out keeps its default when the field is absent.
std::optional<ApiError> read_flag(const json& j, const char* name, bool* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(std::string("'") + name + "' must be a boolean", name);
  *out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

struct HttpServer::Impl {
  Impl(Scheduler& s, const Tokenizer& t, const ChatPrompt& c, HttpOptions o)
      : scheduler(s),
        tokenizer(t),
        options(std::move(o)),
        metrics(std::make_shared<ServerMetrics>(options.expert_groups)) {
    generation.scheduler = &s;
    generation.tokenizer = &t;
    generation.chat = &c;
    generation.model_name = options.model_name;
    generation.request_timeout = options.request_timeout;
    generation.metrics = metrics;
    generation.stopping = [this] { return stopping.load(); };
    generation.error = [this](const ApiError& e) { return error(e); };
    generation.decorate = [this](HttpResponse* r) { decorate(r); };
  }

  void decorate(HttpResponse* r) const;
  HttpResponse error(const ApiError& e) const;
  HttpResponse loop_error(int status, const std::string& message) const;
  std::optional<HttpResponse> inline_route(const HttpRequest& req) const;
  HandlerResult handle(HttpRequest& req, const Waker& waker);
  HttpResponse tokenize(const HttpRequest& req) const;
  HttpResponse detokenize(const HttpRequest& req) const;
  void done(const std::string& method, const std::string& path, int status);
  bool authorized(const HttpRequest& req) const {
    if (options.api_key.empty()) return true;
    const std::string* given = req.header("authorization");
    return same_secret(given ? *given : std::string(), "Bearer " + options.api_key);
  }

  Scheduler& scheduler;
  const Tokenizer& tokenizer;
  HttpOptions options;
  std::shared_ptr<ServerMetrics> metrics;
  GenerationServices generation;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::atomic<bool> stopping{false};
  std::unique_ptr<HttpLoop> loop;  // last: its replies use the members above
};

void HttpServer::Impl::decorate(HttpResponse* r) const {
  if (options.cors_origin.empty()) return;
  r->headers.emplace_back("Access-Control-Allow-Origin", options.cors_origin);
  if (options.cors_origin != "*") r->headers.emplace_back("Vary", "Origin");
}

HttpResponse HttpServer::Impl::error(const ApiError& e) const {
  HttpResponse r = json_response(e.status, error_body(e));
  decorate(&r);
  return r;
}

HttpResponse HttpServer::Impl::loop_error(int status, const std::string& message) const {
  if (status == 413) return error(payload_too_large(options.max_body_bytes));
  ApiError e{status, status >= 500 ? "server_error" : "invalid_request_error", message, "", ""};
  if (status == 400) e.message = "Malformed HTTP request: " + message;
  HttpResponse r = error(e);
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// OPTIONS (CORS preflight) and /health: answered on the loop thread, whatever the workers do.
std::optional<HttpResponse> HttpServer::Impl::inline_route(const HttpRequest& req) const {
  const Route* route = find_route(req.path);
  if (route != nullptr && std::string_view(route->path) == "/health" && method_fits(*route, req.method)) {
    HttpResponse r = json_response(200, R"({"status":"ok"})");
    decorate(&r);
    return r;
  }
  if (req.method != "OPTIONS") return std::nullopt;
  if (route == nullptr) {
    return error({404, "invalid_request_error", "Unknown route: OPTIONS " + req.path, "", "not_found"});
  }
  HttpResponse r;
  r.status = 204;
  const std::string methods = std::string(route->method) + ", OPTIONS";
  r.headers.emplace_back("Allow", methods);
  if (!options.cors_origin.empty()) {
    decorate(&r);
    r.headers.emplace_back("Access-Control-Allow-Methods", methods);
    const std::string* asked = req.header("access-control-request-headers");
    r.headers.emplace_back("Access-Control-Allow-Headers", asked && !asked->empty() ? *asked : "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "86400");
  }
  return r;
}

HandlerResult HttpServer::Impl::handle(HttpRequest& req, const Waker& waker) {
  const Route* route = find_route(req.path);
  if (route == nullptr) {
    return {error({404, "invalid_request_error", "Unknown route: " + req.method + " " + req.path, "", "not_found"}),
            nullptr};
  }
  if (!method_fits(*route, req.method)) {
    HttpResponse r = error({405, "invalid_request_error",
                            req.method + " is not allowed on " + req.path + " (use " + route->method + ")", "",
                            "method_not_allowed"});
    r.headers.emplace_back("Allow", std::string(route->method) + ", OPTIONS");
    return {std::move(r), nullptr};
  }
  if (!authorized(req)) return {error(unauthorized()), nullptr};
  const std::string_view label = route->label;
  if (label == "/v1/chat/completions") return start_generation(generation, Endpoint::kChat, req.body, waker);
  if (label == "/v1/completions") return start_generation(generation, Endpoint::kCompletion, req.body, waker);
  if (label == "/tokenize") return {tokenize(req), nullptr};
  if (label == "/detokenize") return {detokenize(req), nullptr};
  HttpResponse r;
  if (label == "/v1/models") {
    r = json_response(200, models_body(options.model_name, created));
  } else if (label == "/v1/models/{id}") {
    const std::string id = req.path.substr(std::string_view(route->path).size());
    if (id != options.model_name) {
      return {error({404, "invalid_request_error", "The model '" + id + "' does not exist", "model", "model_not_found"}),
              nullptr};
    }
    r = json_response(200, model_body(options.model_name, created));
  } else {  // /metrics
    r = json_response(200, metrics->render(scheduler.metrics()));
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  }
  decorate(&r);
  return {std::move(r), nullptr};
}

HttpResponse HttpServer::Impl::tokenize(const HttpRequest& req) const {
  const json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(bad_request("the request body is not valid JSON"));
  if (!j.is_object()) return error(bad_request("the request body must be a JSON object"));
  auto content = j.find("content");
  if (content == j.end() || !content->is_string()) return error(bad_request("'content' must be a string", "content"));
  bool add_special = false, parse_special = true, with_pieces = false;
  if (auto e = read_flag(j, "add_special", &add_special)) return error(*e);
  if (auto e = read_flag(j, "parse_special", &parse_special)) return error(*e);
  if (auto e = read_flag(j, "with_pieces", &with_pieces)) return error(*e);
  const std::vector<int32_t> ids = tokenizer.encode(content->get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tokenizer.token_to_piece(id, true);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(c);
    tokens.push_back({{"id", id}, {"piece", valid_utf8(piece) ? json(piece) : bytes}});
  }
  HttpResponse r = json_response(200, json_text(json{{"tokens", std::move(tokens)}}));
  decorate(&r);
  return r;
}

HttpResponse HttpServer::Impl::detokenize(const HttpRequest& req) const {
  const json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(bad_request("the request body is not valid JSON"));
  if (!j.is_object()) return error(bad_request("the request body must be a JSON object"));
  auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) return error(bad_request("'tokens' must be a list of token ids", "tokens"));
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    const std::string param = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return error(bad_request("token ids must be integers", param));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(tokenizer.n_vocab())) {
      return error(bad_request("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                   std::to_string(tokenizer.n_vocab()) + ")",
                               param));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  HttpResponse r = json_response(200, json_text(json{{"content", tokenizer.decode(ids, true)}}));
  decorate(&r);
  return r;
}

void HttpServer::Impl::done(const std::string& method, const std::string& path, int status) {
  const Route* route = find_route(path);
  const bool known = route != nullptr && (method_fits(*route, method) || method == "OPTIONS");
  metrics->count_request(known ? route->label : "other", status);
  if (status >= 500) log_warn("serve: " + method + " " + path + " -> " + std::to_string(status));
}

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatPrompt& chat, HttpOptions options)
    : impl_(std::make_unique<Impl>(scheduler, tokenizer, chat, std::move(options))) {
  Impl& m = *impl_;
  HttpLoopOptions lo;
  lo.limits.max_body = m.options.max_body_bytes;
  lo.workers = m.options.threads;
  lo.idle_timeout = m.options.idle_timeout;
  lo.shutdown_grace = m.options.shutdown_grace;
  HttpHooks hooks;
  hooks.inline_route = [&m](const HttpRequest& r) { return m.inline_route(r); };
  hooks.handle = [&m](HttpRequest& r, const Waker& w) { return m.handle(r, w); };
  hooks.error = [&m](int status, const std::string& message) { return m.loop_error(status, message); };
  hooks.done = [&m](const std::string& method, const std::string& path, int status) { m.done(method, path, status); };
  m.loop = std::make_unique<HttpLoop>(std::move(lo), std::move(hooks));
}

HttpServer::~HttpServer() = default;

StatusOr<int> HttpServer::bind() { return impl_->loop->bind(impl_->options.host, impl_->options.port); }

void HttpServer::run() { impl_->loop->run(); }

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->loop->stop();
}

}  // namespace mt::server
