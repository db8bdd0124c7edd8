// The HTTP loop (server/http_loop.h) over real sockets with handlers of its own: keep-alive
// and pipelined requests, a deferred reply woken from another thread, chunked and
// connection-close stream framing, a client that leaves while its (non-streamed) reply is
// pending gets its reply abandoned, errors the loop answers itself, and stop()'s drain
// (cut() after the grace, then run() returns).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "server/http_loop.h"

namespace mt::server {
namespace {

using namespace std::chrono_literals;

// What the deferred replies saw, across threads.
struct Probe {
  std::atomic<int> abandoned{0}, cut{0};
  std::atomic<bool> release{false};  // the pending reply may answer
};

// Answers once `release` is set (woken by the test), or streams two pieces then ends.
class TestReply final : public DeferredReply {
 public:
  TestReply(Probe& probe, bool stream) : probe_(probe), stream_(stream) {}
  void poll(ReplyWriter& out) override {
    if (stream_) {
      HttpResponse head;
      head.content_type = "text/event-stream";
      out.begin_stream(head);
      out.write("one;");
      out.write("two;");
      if (probe_.cut.load() > 0 || probe_.release.load()) out.end_stream();
      stream_ = false;
      streaming_ = true;
      return;
    }
    if (streaming_ && (probe_.cut.load() > 0 || probe_.release.load())) return out.end_stream();
    if (!streaming_ && probe_.release.load()) out.respond(HttpResponse{200, "text/plain", {}, "released"});
  }
  void abandon() override { probe_.abandoned.fetch_add(1); }
  void cut() override { probe_.cut.fetch_add(1); }

 private:
  Probe& probe_;
  bool stream_, streaming_ = false;
};

class Server {
 public:
  explicit Server(Probe& probe, HttpLoopOptions options = {}) {
    HttpHooks hooks;
    hooks.inline_route = [](const HttpRequest& r) -> std::optional<HttpResponse> {
      if (r.path == "/inline") return HttpResponse{200, "text/plain", {}, "inline"};
      return std::nullopt;
    };
    hooks.handle = [&probe, this](HttpRequest& r, const Waker& w) -> HandlerResult {
      {
        std::lock_guard<std::mutex> lock(mutex);
        last_waker = w;
      }
      if (r.path == "/later") return {std::nullopt, std::make_unique<TestReply>(probe, false)};
      if (r.path == "/stream") return {std::nullopt, std::make_unique<TestReply>(probe, true)};
      return {HttpResponse{200, "text/plain", {}, "echo:" + r.path + ":" + r.body}, nullptr};
    };
    hooks.error = [](int status, const std::string& m) { return HttpResponse{status, "text/plain", {}, "error:" + m}; };
    hooks.done = [this](const std::string&, const std::string&, int) { done.fetch_add(1); };
    loop = std::make_unique<HttpLoop>(options, std::move(hooks));
    auto p = loop->bind("127.0.0.1", 0);
    EXPECT_TRUE(p.ok());
    port = p.ok() ? *p : 0;
    thread = std::thread([this] { loop->run(); });
  }
  ~Server() {
    loop->stop();
    thread.join();
  }
  std::unique_ptr<HttpLoop> loop;
  std::thread thread;
  int port = 0;
  void wake() {
    std::lock_guard<std::mutex> lock(mutex);
    last_waker();
  }
  std::mutex mutex;
  Waker last_waker;  // the last handler's
  std::atomic<int> done{0};
};

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }

// Reads until `until` appears, the server closes, or the timeout.
std::string read_until(int fd, const std::string& until, std::chrono::milliseconds timeout = 3000ms, bool* closed = nullptr) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end && (until.empty() || got.find(until) == std::string::npos)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

TEST(HttpLoop, KeepAlivePipeliningAndInline) {
  Probe probe;
  Server s(probe);
  const int fd = connect_to(s.port);
  send_all(fd, "GET /inline HTTP/1.1\r\n\r\nPOST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzGET /b HTTP/1.1\r\n\r\n");
  const std::string got = read_until(fd, "echo:/b:");
  EXPECT_NE(got.find("inline"), std::string::npos) << got;
  EXPECT_LT(got.find("inline"), got.find("echo:/a:xyz")) << got;  // in order
  EXPECT_LT(got.find("echo:/a:xyz"), got.find("echo:/b:")) << got;
  send_all(fd, "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n");
  bool closed = false;
  const std::string last = read_until(fd, "", 3000ms, &closed);
  EXPECT_NE(last.find("Connection: close"), std::string::npos) << last;
  EXPECT_TRUE(closed);
  close(fd);
}

TEST(HttpLoop, DeferredReplyWokenFromAnotherThread) {
  Probe probe;
  Server s(probe);
  const int fd = connect_to(s.port);
  send_all(fd, "GET /later HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_until(fd, "released", 200ms), "");  // pending
  probe.release = true;
  std::thread([&] { s.wake(); }).join();
  const std::string got = read_until(fd, "released");
  EXPECT_NE(got.find("HTTP/1.1 200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Length: 8"), std::string::npos) << got;
  close(fd);
  EXPECT_EQ(probe.abandoned.load(), 0);
}

TEST(HttpLoop, ClientLeavingAbandonsAPendingReply) {
  Probe probe;
  Server s(probe);
  const int fd = connect_to(s.port);
  send_all(fd, "POST /later HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  std::this_thread::sleep_for(100ms);
  close(fd);
  for (int i = 0; i < 100 && probe.abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(probe.abandoned.load(), 1);
  const int again = connect_to(s.port);  // still serving
  send_all(again, "GET /inline HTTP/1.1\r\n\r\n");
  EXPECT_NE(read_until(again, "inline").find("inline"), std::string::npos);
  close(again);
}

TEST(HttpLoop, StreamFraming) {
  Probe probe;
  probe.release = true;
  Server s(probe);
  int fd = connect_to(s.port);
  send_all(fd, "GET /stream HTTP/1.1\r\n\r\n");
  std::string got = read_until(fd, "0\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("4\r\none;\r\n4\r\ntwo;\r\n0\r\n\r\n"), std::string::npos) << got;
  close(fd);
  fd = connect_to(s.port);  // HTTP/1.0: the end of the body is the end of the connection
  send_all(fd, "GET /stream HTTP/1.0\r\n\r\n");
  bool closed = false;
  got = read_until(fd, "", 3000ms, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 8), "one;two;") << got;
  close(fd);
}

TEST(HttpLoop, LoopErrorsCloseTheConnection) {
  Probe probe;
  HttpLoopOptions o;
  o.limits.max_body = 16;
  o.header_timeout = 300ms;
  Server s(probe, o);
  int fd = connect_to(s.port);
  send_all(fd, "POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'a'));
  bool closed = false;
  std::string got = read_until(fd, "", 3000ms, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got;
  EXPECT_TRUE(closed);
  close(fd);
  fd = connect_to(s.port);  // slowloris: a head that never ends
  send_all(fd, "GET / HTTP/1.1\r\nX: ");
  closed = false;
  got = read_until(fd, "", 3000ms, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_TRUE(closed);
  close(fd);
}

TEST(HttpLoop, StopDrainsThenCutsAfterTheGrace) {
  Probe probe;
  HttpLoopOptions o;
  o.shutdown_grace = 200ms;
  auto s = std::make_unique<Server>(probe, o);
  const int idle = connect_to(s->port);
  const int fd = connect_to(s->port);
  send_all(fd, "GET /stream HTTP/1.1\r\n\r\n");
  EXPECT_NE(read_until(fd, "two;").find("two;"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  s->loop->stop();
  bool idle_closed = false;
  read_until(idle, "", 1000ms, &idle_closed);
  EXPECT_TRUE(idle_closed);  // idle connections close at once
  for (int i = 0; i < 100 && probe.cut.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(probe.cut.load(), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  s->wake();  // the cut stream ends at its next poll
  bool closed = false;
  const std::string rest = read_until(fd, "", 3000ms, &closed);
  EXPECT_NE(rest.find("0\r\n\r\n"), std::string::npos) << rest;
  EXPECT_TRUE(closed);
  s.reset();  // run() has returned: the destructor joins
  close(fd);
  close(idle);
}

}  // namespace
}  // namespace mt::server
