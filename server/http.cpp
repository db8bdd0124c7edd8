#include "server/http.h"

#include <httplib.h>

#include <ctime>
#include <mutex>
#include <regex>
#include <set>

#include "core/log.h"
#include "server/chat_reply.h"
#include "server/generation.h"

namespace mt::server {

namespace {

using httplib::Request;
using httplib::Response;

// How long an HTTP thread waits for the next event before looking at its client again.
constexpr std::chrono::milliseconds kPoll{250};

struct Route {
  const char* pattern;  // httplib regex
  const char* method;
  const char* label;  // in /metrics
};
const Route kRoutes[] = {{"/v1/chat/completions", "POST", "/v1/chat/completions"},
                         {"/v1/completions", "POST", "/v1/completions"},
                         {"/v1/models", "GET", "/v1/models"},
                         {"/v1/models/(.+)", "GET", "/v1/models/{id}"},
                         {"/health", "GET", "/health"},
                         {"/metrics", "GET", "/metrics"}};

const Route* find_route(const std::string& path) {
  static const std::vector<std::regex> patterns = [] {
    std::vector<std::regex> v;
    for (const Route& r : kRoutes) v.emplace_back(r.pattern);
    return v;
  }();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (std::regex_match(path, patterns[i])) return &kRoutes[i];
  }
  return nullptr;
}

void send_json(Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(Response& res, const ApiError& e) { send_json(res, e.status, error_body(e)); }

ApiError server_error(int status, std::string message) {
  return ApiError{status, "server_error", std::move(message), "", ""};
}

// The answer for a generation that ended without "stop" or "length".
ApiError ended_error(const GenerationEvent& e) {
  if (e.kind == GenerationEvent::Kind::kError) return server_error(500, "generation failed: " + e.error);
  return server_error(503, "generation " + e.finish_reason + " (the server is shutting down or the request timed out)");
}

ApiError unauthorized() {
  return {401, "invalid_request_error", "Incorrect or missing API key (Authorization: Bearer KEY)", "",
          "invalid_api_key"};
}

ApiError payload_too_large(size_t limit) {
  return {413, "invalid_request_error",
          "The request body is larger than the limit of " + std::to_string(limit) + " bytes", "", "payload_too_large"};
}

// A path no route serves, or a route asked with the wrong method (405, with Allow).
ApiError no_route(const Request& req, Response& res) {
  if (const Route* route = find_route(req.path)) {
    res.set_header("Allow", route->method);
    return {405, "invalid_request_error",
            req.method + " is not allowed on " + req.path + " (use " + route->method + ")", "", "method_not_allowed"};
  }
  return {404, "invalid_request_error", "Unknown route: " + req.method + " " + req.path, "", "not_found"};
}

bool finished_normally(const GenerationEvent& e) {
  return e.kind == GenerationEvent::Kind::kDone && (e.finish_reason == "stop" || e.finish_reason == "length");
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size() || b.empty();
  for (size_t i = 0; i < a.size() && !b.empty(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % b.size()]);
  return diff == 0;
}

// One streaming response: the state its SSE content provider carries between calls.
struct StreamState {
  std::shared_ptr<PendingGeneration> pending;
  ResponseMeta meta;
  uint64_t id = 0;
  bool include_usage = false;
  std::shared_ptr<ChatReply> reply;  // chat with tools: read through the tool-call syntax
  bool started = false;
  bool finished = false;  // the final event was written (or the client is gone)
};

}  // namespace

struct HttpServer::Impl {
  Impl(Scheduler& s, const Tokenizer& t, const ChatPrompt& c, HttpOptions o)
      : scheduler(s), tokenizer(t), chat(c), options(std::move(o)), metrics(options.expert_groups) {}

  void install();
  bool read_body(const httplib::ContentReader& reader, Response& res, std::string* body);
  httplib::Server::HandlerWithContentReader generation_route(Endpoint endpoint);
  void generate(const std::string& body, Response& res, Endpoint endpoint);
  void answer(const std::shared_ptr<PendingGeneration>& pending, const ResponseMeta& meta, uint64_t id, Response& res,
              ChatReply* reply);
  bool pump(StreamState& st, httplib::DataSink& sink);
  bool authorized(const Request& req) const;
  void untrack(uint64_t id);
  httplib::Server::Handler guarded(httplib::Server::Handler handler);

  Scheduler& scheduler;
  const Tokenizer& tokenizer;
  const ChatPrompt& chat;
  HttpOptions options;
  ServerMetrics metrics;
  httplib::Server http;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::mutex mutex;  // guards inflight and stopping
  std::set<uint64_t> inflight;
  bool stopping = false;
};

bool HttpServer::Impl::authorized(const Request& req) const {
  if (options.api_key.empty()) return true;
  return same_secret(req.get_header_value("Authorization"), "Bearer " + options.api_key);
}

httplib::Server::Handler HttpServer::Impl::guarded(httplib::Server::Handler handler) {
  return [this, handler = std::move(handler)](const Request& req, Response& res) {
    if (!authorized(req)) return send_error(res, unauthorized());
    handler(req, res);
  };
}

void HttpServer::Impl::untrack(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex);
  inflight.erase(id);
}

// The body is read here, not by httplib, so that the size limit also holds for a chunked
// body (httplib 0.11 checks it only against Content-Length). It is read before anything is
// answered: closing a connection with unread input resets it, losing the answer.
bool HttpServer::Impl::read_body(const httplib::ContentReader& reader, Response& res, std::string* body) {
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    too_large = body->size() + n > options.max_body_bytes;
    if (!too_large) body->append(data, n);
    return !too_large;
  });
  if (read) return true;
  res.set_header("Connection", "close");
  if (too_large || res.status == 413) {  // 413: httplib saw a Content-Length over the limit
    send_error(res, payload_too_large(options.max_body_bytes));
  } else {
    send_error(res, bad_request("the request body could not be read"));
  }
  return false;
}

httplib::Server::HandlerWithContentReader HttpServer::Impl::generation_route(Endpoint endpoint) {
  return [this, endpoint](const Request& req, Response& res, const httplib::ContentReader& reader) {
    std::string body;
    if (!read_body(reader, res, &body)) return;
    if (!authorized(req)) return send_error(res, unauthorized());
    generate(body, res, endpoint);
  };
}

void HttpServer::Impl::generate(const std::string& body, Response& res, Endpoint endpoint) {
  const auto arrived = std::chrono::steady_clock::now();
  ApiRequest r;
  if (auto e = parse_request(endpoint, body, &r)) return send_error(res, *e);
  if (!r.model.empty() && r.model != options.model_name) {
    return send_error(
        res, {404, "invalid_request_error",
              "The model '" + r.model + "' does not exist; this server serves '" + options.model_name + "'", "model",
              "model_not_found"});
  }
  std::string text = r.prompt;
  std::shared_ptr<ChatReply> reply;
  if (endpoint == Endpoint::kChat) {
    auto turn = prepare_chat(chat, r);
    if (!turn.ok()) return send_error(res, bad_request(turn.status().message(), "messages"));
    text = std::move(turn->prompt);
    if (turn->syntax != ToolSyntax::kNone) reply = std::make_shared<ChatReply>(*turn);
  }
  const char* prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  std::vector<int32_t> prompt = tokenizer.encode(text, true, true);
  if (prompt.empty()) return send_error(res, bad_request("the prompt is empty", prompt_param));
  const uint32_t n_ctx = scheduler.options().n_ctx;
  const uint64_t max_tokens = r.max_tokens ? *r.max_tokens : n_ctx - std::min<uint64_t>(prompt.size(), n_ctx);
  if (prompt.size() >= n_ctx || prompt.size() + max_tokens > n_ctx) {
    return send_error(
        res, bad_request("This model's maximum context length is " + std::to_string(n_ctx) +
                             " tokens; the request needs " + std::to_string(prompt.size()) + " in the prompt + " +
                             std::to_string(std::max<uint64_t>(max_tokens, 1)) + " to generate",
                         prompt_param, "context_length_exceeded"));
  }
  auto pending = std::make_shared<PendingGeneration>(&metrics, arrived);
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.sampling = r.sampling;
  g.max_tokens = static_cast<uint32_t>(max_tokens);
  g.stops = r.stops;
  g.choices = r.choices;  // a forced tool call's grammar, harmony's control tokens
  g.timeout = options.request_timeout;
  g.on_event = [pending](const GenerationEvent& e) { return pending->push(e); };
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) return send_error(res, server_error(503, "the server is shutting down"));
    auto submitted = scheduler.submit(std::move(g));
    if (!submitted.ok()) return send_error(res, bad_request(submitted.status().message()));
    id = *submitted;
    inflight.insert(id);
  }
  ResponseMeta meta{endpoint, new_response_id(endpoint), static_cast<int64_t>(std::time(nullptr)), options.model_name};
  if (!r.stream) return answer(pending, meta, id, res, reply.get());

  auto st = std::make_shared<StreamState>(StreamState{pending, meta, id, r.include_usage, reply});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return pump(*st, sink); },
      [this, st](bool) {
        untrack(st->id);
        if (!st->finished) {
          st->pending->abandon();
          scheduler.cancel(st->id);
        }
      });
}

void HttpServer::Impl::answer(const std::shared_ptr<PendingGeneration>& pending, const ResponseMeta& meta, uint64_t id,
                              Response& res, ChatReply* reply) {
  std::string text;
  for (;;) {
    for (const GenerationEvent& e : pending->take(kPoll)) {
      if (e.kind == GenerationEvent::Kind::kText) {
        text += e.text;
        continue;
      }
      untrack(id);
      if (!finished_normally(e)) return send_error(res, ended_error(e));
      if (reply) return send_json(res, 200, reply->body(meta, text, e.finish_reason, {e.prompt_tokens, e.completion_tokens}));
      return send_json(res, 200, response_body(meta, text, e.finish_reason, {e.prompt_tokens, e.completion_tokens}));
    }
  }
}

bool HttpServer::Impl::pump(StreamState& st, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
  auto gone = [&] {
    st.finished = true;
    st.pending->abandon();
    scheduler.cancel(st.id);
    return false;
  };
  const bool usage_field = st.include_usage;
  if (!st.started) {
    st.started = true;
    if (st.meta.endpoint == Endpoint::kChat && !write(chunk_start(st.meta, usage_field))) return gone();
  }
  for (const GenerationEvent& e : st.pending->take(kPoll)) {
    if (e.kind == GenerationEvent::Kind::kText) {
      const std::string events = !st.reply ? chunk_text(st.meta, e.text, usage_field)
                                           : st.reply->stream(st.meta, e.text, usage_field);
      if (!e.text.empty() && !events.empty() && !write(events)) return gone();
      continue;
    }
    st.finished = true;
    if (finished_normally(e)) {
      write(st.reply ? st.reply->stream_finish(st.meta, e.finish_reason, usage_field)
                     : chunk_finish(st.meta, e.finish_reason, usage_field));
      if (st.include_usage) write(chunk_usage(st.meta, {e.prompt_tokens, e.completion_tokens}));
    } else {
      write(sse_error(ended_error(e)));
    }
    write(std::string(kSseDone));
    sink.done();
    return true;
  }
  return true;
}

void HttpServer::Impl::install() {
  http.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_tcp_nodelay(true);  // each SSE chunk leaves at once (Nagle would hold it for the client's ACK)
  http.Post("/v1/chat/completions", generation_route(Endpoint::kChat));
  http.Post("/v1/completions", generation_route(Endpoint::kCompletion));
  http.Get("/v1/models", guarded([this](const Request&, Response& s) {
             send_json(s, 200, models_body(options.model_name, created));
           }));
  http.Get("/v1/models/(.+)", guarded([this](const Request& q, Response& s) {
             if (q.matches[1] == options.model_name) return send_json(s, 200, model_body(options.model_name, created));
             send_error(s, {404, "invalid_request_error", "The model '" + q.matches[1].str() + "' does not exist",
                            "model", "model_not_found"});
           }));
  // Any other request with a body: its body is read within the limit (httplib would read a
  // chunked one of any size), then refused.
  const httplib::Server::HandlerWithContentReader refuse = [this](const Request& req, Response& res,
                                                                  const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(reader, res, &body)) send_error(res, no_route(req, res));
  };
  http.Post(".*", refuse);
  http.Put(".*", refuse);
  http.Patch(".*", refuse);
  http.Delete(".*", refuse);
  http.Get("/health", [](const Request&, Response& s) { send_json(s, 200, R"({"status":"ok"})"); });
  http.Get("/metrics", guarded([this](const Request&, Response& s) {
             s.set_content(metrics.render(scheduler.metrics()), "text/plain; version=0.0.4; charset=utf-8");
           }));

  // Errors httplib answers itself (no route, a body over the limit, a malformed request)
  // get an OpenAI error body; a known path asked with the wrong method becomes 405.
  httplib::Server::HandlerWithResponse on_error = [this](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e{res.status, "invalid_request_error", "HTTP error " + std::to_string(res.status), "", ""};
    if (res.status == 404) {
      e = no_route(req, res);
    } else if (res.status == 413) {
      e = payload_too_large(options.max_body_bytes);
    } else if (res.status == 400) {
      e.message = "Malformed HTTP request";
    } else if (res.status >= 500) {
      e.type = "server_error";
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  };
  http.set_error_handler(std::move(on_error));
  http.set_exception_handler(
      [](const Request&, Response& res, std::exception_ptr) { send_error(res, server_error(500, "internal error")); });
  http.set_logger([this](const Request& req, const Response& res) {
    const Route* route = find_route(req.path);
    metrics.count_request(route != nullptr && res.status != 405 ? route->label : "other", res.status);
    if (res.status >= 500) log_warn("serve: " + req.method + " " + req.path + " -> " + std::to_string(res.status));
  });
}

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatPrompt& chat, HttpOptions options)
    : impl_(std::make_unique<Impl>(scheduler, tokenizer, chat, std::move(options))) {
  impl_->install();
}

HttpServer::~HttpServer() = default;

StatusOr<int> HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) return io_error("cannot listen on " + o.host);
    return port;
  }
  if (!impl_->http.bind_to_port(o.host, o.port))
    return io_error("cannot listen on " + o.host + ":" + std::to_string(o.port));
  return o.port;
}

void HttpServer::run() { impl_->http.listen_after_bind(); }

void HttpServer::stop() {
  std::set<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
    ids = impl_->inflight;
  }
  for (uint64_t id : ids) impl_->scheduler.cancel(id);
  impl_->http.stop();
}

}  // namespace mt::server
