// HttpServer: the routes of `moetier serve`, on our own HTTP/1.1 loop (http_loop.h).
//   POST /v1/chat/completions, POST /v1/completions   parsed and checked (openai.h), the
//        chat rendered (chat_prompt.h), tokenized, submitted to the Scheduler; answered as
//        one JSON body, or with "stream": true as SSE chunks ending in `data: [DONE]`
//        (http_generate.h)
//   POST /tokenize {"content", "add_special", "parse_special", "with_pieces"} -> {"tokens"},
//        POST /detokenize {"tokens"} -> {"content"} (llama-server's shapes)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text, metrics.h)
//   OPTIONS on any route: 204 with Allow, and with a CORS origin the preflight answer
//        (Access-Control-Allow-Origin/-Methods/-Headers/-Max-Age); that origin is also
//        named on every other response
// Invariants: every failure is answered with an OpenAI error object and a 4xx/5xx status
// (bad JSON or fields 400, wrong API key 401, unknown model or route 404, wrong method
// 405, a body over the limit 413, a head over the limits 414/431), and the server goes on
// serving; no thread waits on a generation; a client that goes away cancels its request,
// streamed or not; /health is answered on the loop thread, never queued behind work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/chat_prompt.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace mt::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                              // 0: any free port (bind() returns it)
  std::string model_name;                       // the "model" clients name
  std::string api_key;                          // "": no authentication
  size_t max_body_bytes = size_t{8} << 20;      // larger bodies get 413
  std::string cors_origin;                      // "": no CORS headers; "*" or one origin
  uint32_t threads = 4;                         // worker threads: parse, render and tokenize requests
  std::chrono::milliseconds request_timeout{0};  // a request still running after this ends ("timeout"); 0: none
  std::chrono::milliseconds shutdown_grace{10000};  // stop(): running requests may finish within this
  std::chrono::milliseconds idle_timeout{60000};    // an idle keep-alive connection closes
  std::vector<ExpertGroupLabel> expert_groups;  // for /metrics
};

class HttpServer {
 public:
  // scheduler, tokenizer and chat must outlive the server.
  HttpServer(Scheduler& scheduler, const Tokenizer& tokenizer, const ChatPrompt& chat, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port.
  StatusOr<int> bind();
  // Serves until stop(); returns once every connection is closed.
  void run();
  // From any thread: stop accepting; the requests in flight may finish within
  // shutdown_grace, then they are cut (streams end cleanly with [DONE]) and run() returns.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt::server
