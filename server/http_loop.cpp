#include "server/http_loop.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "core/log.h"
#include "server/http_mailbox.h"
#include "server/http_socket.h"
#include "server/http_wire.h"

namespace mt::server {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kListenTag = 1, kWakeTag = 2, kFirstConnection = 16;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kMaxReadPerEvent = 1 << 20;         // then the other connections get a turn
constexpr size_t kMaxBufferedWhileBusy = 64 << 10;   // pipelined input held while a reply runs
constexpr size_t kMaxUnsentBytes = size_t{64} << 20;  // a client that reads nothing is dropped
constexpr std::chrono::milliseconds kTick{100};
constexpr std::chrono::milliseconds kWriteTimeout{60000};  // no byte of pending output taken
constexpr std::chrono::milliseconds kLingerTime{2000};        // discarding input after the last response
constexpr std::chrono::milliseconds kHardStop{5000};      // after the grace: everything closes
constexpr std::chrono::milliseconds kAcceptPause{100};    // out of file descriptors

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

namespace {

struct Connection {
  enum class Phase { kRead, kBusy, kReply, kLinger };
  int fd = -1;
  uint64_t id = 0;
  RequestParser parser;
  std::string in;  // read, not yet parsed
  std::string out;
  size_t out_pos = 0;
  Phase phase = Phase::kRead;
  std::unique_ptr<DeferredReply> reply;
  std::string method, path;  // of the request being answered
  int minor_version = 1;
  int status = 0;            // of the response begun; 0: none yet
  bool chunked = false;      // the streamed body is chunked (else it ends with the connection)
  bool close_after = false;  // the connection closes once this reply is written
  bool sent_continue = false;
  bool eof = false;  // the client closed its side
  bool shut_write = false;
  uint32_t events = 0;  // asked of epoll
  size_t discarded = 0;  // kLinger
  Clock::time_point last_io, request_start, linger_until;

  bool pending_output() const { return out_pos < out.size(); }
};

}  // namespace

struct HttpLoop::Impl {
  Impl(HttpLoopOptions o, HttpHooks h) : options(std::move(o)), hooks(std::move(h)), box(std::make_shared<Mailbox>()) {}
  ~Impl();

  class Writer;

  void accept_all(Clock::time_point now);
  void set_listening(bool on);
  void on_socket(Connection& c, uint32_t events, Clock::time_point now);
  void process_input(Connection& c, Clock::time_point now);
  void dispatch(Connection& c, Clock::time_point now);
  void loop_error(Connection& c, int status, const std::string& message);
  void respond(Connection& c, const HttpResponse& r);
  void end_reply(Connection& c, Clock::time_point now);
  void poll_reply(Connection& c, Clock::time_point now);
  void flush(Connection& c, Clock::time_point now);
  void client_gone(Connection& c);
  void close(Connection& c);
  void update_events(Connection& c);
  void take_mail(Clock::time_point now);
  void sweep(Clock::time_point now);
  void begin_drain(Clock::time_point now);
  void close_mailbox();
  Connection* find(uint64_t id) {
    auto it = connections.find(id);
    return it == connections.end() ? nullptr : it->second.get();
  }

  HttpLoopOptions options;
  HttpHooks hooks;
  std::shared_ptr<Mailbox> box;
  int epoll_fd = -1, listen_fd = -1, event_fd = -1;
  bool listening = false;
  Clock::time_point accept_paused_until{};
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  std::vector<uint64_t> closed_ids;  // closed during this round of events (their memory goes after it)
  std::vector<std::unique_ptr<Connection>> graveyard;
  uint64_t next_id = kFirstConnection;
  bool draining = false, cut_sent = false;
  Clock::time_point cut_at, hard_stop_at, last_sweep;

  WorkerPool workers;
};

// The loop's ReplyWriter over one connection: it appends to the connection's output and
// notes the end; the loop acts on the end once poll() has returned.
class HttpLoop::Impl::Writer final : public ReplyWriter {
 public:
  Writer(Impl& impl, Connection& c) : impl_(impl), c_(c) {}
  void respond(HttpResponse r) override {
    if (ended || c_.status != 0) return;
    impl_.respond(c_, r);
    ended = true;
  }
  void begin_stream(HttpResponse head) override {
    if (ended || c_.status != 0) return;
    c_.chunked = c_.minor_version >= 1;
    if (!c_.chunked) c_.close_after = true;
    c_.status = head.status;
    c_.out += response_head(head, c_.chunked ? Framing::kChunked : Framing::kClose, !c_.close_after);
  }
  void write(std::string_view data) override {
    if (ended || c_.status == 0) return;
    if (c_.chunked) {
      append_chunk(&c_.out, data);
    } else {
      c_.out.append(data);
    }
  }
  void end_stream() override {
    if (ended || c_.status == 0) return;
    if (c_.chunked) c_.out += kLastChunk;
    ended = true;
  }
  bool ended = false;

 private:
  Impl& impl_;
  Connection& c_;
};

HttpLoop::Impl::~Impl() {
  close_mailbox();
  for (auto& [id, c] : connections) {
    if (c->reply) c->reply->abandon();
    ::close(c->fd);
  }
  for (int fd : {listen_fd, event_fd, epoll_fd}) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpLoop::Impl::update_events(Connection& c) {
  uint32_t want = EPOLLRDHUP;
  const bool busy = c.phase == Connection::Phase::kBusy || c.phase == Connection::Phase::kReply;
  if (!(busy && c.in.size() >= kMaxBufferedWhileBusy) && !c.eof) want |= EPOLLIN;
  if (c.pending_output()) want |= EPOLLOUT;
  if (c.eof) want &= ~static_cast<uint32_t>(EPOLLRDHUP);  // seen; level-triggered it would repeat
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = want;
}

void HttpLoop::Impl::set_listening(bool on) {
  if (listen_fd < 0 || on == listening) return;
  epoll_event ev{};
  ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
  listening = on;
}

void HttpLoop::Impl::accept_all(Clock::time_point now) {
  while (listening) {
    if (connections.size() >= options.max_connections) {
      set_listening(false);  // taken up again when one closes
      return;
    }
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log_warn("serve: cannot accept a connection (" + errno_text(errno) + "); pausing");
        set_listening(false);
        accept_paused_until = now + kAcceptPause;
      }
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // each SSE chunk leaves at once
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->id = next_id++;
    c->parser = RequestParser(options.limits);
    c->last_io = now;
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    connections.emplace(c->id, std::move(c));
  }
}

void HttpLoop::Impl::close(Connection& c) {
  if (c.reply) {
    c.reply->abandon();
    c.reply.reset();
  }
  ::close(c.fd);  // also leaves the epoll set
  auto it = connections.find(c.id);
  graveyard.push_back(std::move(it->second));  // `c` stays valid until this round ends
  connections.erase(it);
  if (!draining && !listening && listen_fd >= 0 && accept_paused_until <= Clock::now()) set_listening(true);
}

// The client is gone (a read of 0 bytes or an error while a reply runs, a failed write).
void HttpLoop::Impl::client_gone(Connection& c) {
  if (c.phase == Connection::Phase::kBusy || c.phase == Connection::Phase::kReply) {
    if (c.reply) c.reply->abandon();
    c.reply.reset();
    if (hooks.done) hooks.done(c.method, c.path, c.status ? c.status : 499);
  }
  close(c);
}

void HttpLoop::Impl::respond(Connection& c, const HttpResponse& r) {
  c.status = r.status;
  c.out += serialize_response(r, !c.close_after, c.method == "HEAD");
}

// An error the loop answers itself: the request is not read any further; the connection
// closes after the response.
void HttpLoop::Impl::loop_error(Connection& c, int status, const std::string& message) {
  c.close_after = true;
  c.method = c.parser.request().method;
  c.path = c.parser.request().path;
  c.phase = Connection::Phase::kBusy;
  respond(c, hooks.error(status, message));
  c.in.clear();
}

void HttpLoop::Impl::end_reply(Connection& c, Clock::time_point now) {
  if (hooks.done) hooks.done(c.method, c.path, c.status);
  c.reply.reset();
  c.status = 0;
  c.chunked = false;
  c.method.clear();
  c.path.clear();
  c.parser.reset();
  c.sent_continue = false;
  if (c.close_after || draining) {
    c.phase = Connection::Phase::kLinger;
    c.linger_until = now + kLingerTime;
    c.in.clear();
  } else {
    c.phase = Connection::Phase::kRead;
    c.last_io = now;
  }
}

void HttpLoop::Impl::dispatch(Connection& c, Clock::time_point now) {
  HttpRequest& r = c.parser.request();
  c.method = r.method;
  c.path = r.path;
  c.minor_version = r.minor_version;
  c.close_after = !r.keep_alive || draining;
  c.phase = Connection::Phase::kBusy;
  if (draining) {
    respond(c, hooks.error(503, "the server is shutting down"));
    return end_reply(c, now);
  }
  if (hooks.inline_route) {
    if (std::optional<HttpResponse> answer = hooks.inline_route(r)) {
      respond(c, *answer);
      return end_reply(c, now);
    }
  }
  workers.post([this, id = c.id, request = std::move(r)]() mutable {
    HandlerResult result;
    try {
      result = hooks.handle(request, Waker(box, id));
    } catch (const std::exception& e) {
      log_warn(std::string("serve: a handler failed: ") + e.what());
      result = HandlerResult{hooks.error(500, "internal error"), nullptr};
    }
    box->post(id, std::move(result));
  });
}

void HttpLoop::Impl::process_input(Connection& c, Clock::time_point now) {
  while (c.phase == Connection::Phase::kRead && !c.in.empty()) {
    const bool was_started = c.parser.started();
    const size_t n = c.parser.feed(c.in);
    c.in.erase(0, n);
    if (!was_started && c.parser.started()) c.request_start = now;
    const RequestParser::State state = c.parser.state();
    if (state == RequestParser::State::kError) {
      loop_error(c, c.parser.error_status(), c.parser.error_message());
      end_reply(c, now);
    } else if (state == RequestParser::State::kComplete) {
      dispatch(c, now);
    } else {
      if (c.parser.head_done() && c.parser.request().expect_continue && !c.sent_continue) {
        c.out += kContinue;
        c.sent_continue = true;
      }
      break;
    }
  }
}

void HttpLoop::Impl::flush(Connection& c, Clock::time_point now) {
  while (c.pending_output()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      c.last_io = now;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return client_gone(c);
  }
  if (!c.pending_output()) {
    c.out.clear();
    c.out_pos = 0;
    if (c.phase == Connection::Phase::kLinger && !c.shut_write) {
      ::shutdown(c.fd, SHUT_WR);  // the client sees the end; what it still sends is read and dropped
      c.shut_write = true;
      if (c.eof) return close(c);
    }
  } else if (c.out.size() - c.out_pos > kMaxUnsentBytes) {
    return client_gone(c);
  }
  update_events(c);
}

void HttpLoop::Impl::poll_reply(Connection& c, Clock::time_point now) {
  Writer w(*this, c);
  c.reply->poll(w);
  if (w.ended) {
    end_reply(c, now);
    process_input(c, now);  // a pipelined request
  }
  flush(c, now);
}

void HttpLoop::Impl::on_socket(Connection& c, uint32_t events, Clock::time_point now) {
  if (events & EPOLLERR) return client_gone(c);
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
    char buffer[kReadChunk];
    size_t total = 0;
    while (total < kMaxReadPerEvent && !c.eof) {
      const bool busy = c.phase == Connection::Phase::kBusy || c.phase == Connection::Phase::kReply;
      if (busy && c.in.size() >= kMaxBufferedWhileBusy) break;
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        total += static_cast<size_t>(n);
        c.last_io = now;
        if (c.phase == Connection::Phase::kLinger) {
          c.discarded += static_cast<size_t>(n);
        } else {
          c.in.append(buffer, static_cast<size_t>(n));
          process_input(c, now);
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && c.phase != Connection::Phase::kLinger) return client_gone(c);
      c.eof = true;  // 0 bytes (or an error while lingering): the client's side is closed
    }
    // Input held back while a reply runs is not read to its end: the hang-up says it all.
    const bool busy = c.phase == Connection::Phase::kBusy || c.phase == Connection::Phase::kReply;
    if (busy && (events & (EPOLLRDHUP | EPOLLHUP))) c.eof = true;
    if (c.eof) {
      switch (c.phase) {
        case Connection::Phase::kBusy:
        case Connection::Phase::kReply:
          return client_gone(c);
        case Connection::Phase::kRead:
          if (!c.pending_output()) return close(c);
          c.phase = Connection::Phase::kLinger;  // write what is answered, then close
          c.linger_until = now + kLingerTime;
          break;
        case Connection::Phase::kLinger:
          if (c.shut_write || !c.pending_output()) return close(c);
          break;
      }
    }
    if (c.phase == Connection::Phase::kLinger && c.discarded > options.limits.max_body + (1 << 20)) return close(c);
  }
  flush(c, now);
}

void HttpLoop::Impl::take_mail(Clock::time_point now) {
  uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(event_fd, &count, sizeof count);
  Mailbox::Contents mail = box->take();
  for (Mailbox::Done& d : mail.done) {
    Connection* c = find(d.connection);
    if (c == nullptr || c->phase != Connection::Phase::kBusy) {
      if (d.result.deferred) d.result.deferred->abandon();  // its client left while the handler ran
      continue;
    }
    if (d.result.deferred) {
      c->reply = std::move(d.result.deferred);
      c->phase = Connection::Phase::kReply;
      if (cut_sent) c->reply->cut();
      poll_reply(*c, now);
      continue;
    }
    respond(*c, d.result.response ? *d.result.response : hooks.error(500, "the handler gave no response"));
    end_reply(*c, now);
    process_input(*c, now);
    flush(*c, now);
  }
  for (uint64_t id : mail.woken) {
    Connection* c = find(id);
    if (c != nullptr && c->phase == Connection::Phase::kReply && c->reply) poll_reply(*c, now);
  }
  if (mail.stop && !draining) begin_drain(now);
}

void HttpLoop::Impl::begin_drain(Clock::time_point now) {
  draining = true;
  if (listen_fd >= 0) {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
    ::close(listen_fd);
    listen_fd = -1;
    listening = false;
  }
  cut_at = now + options.shutdown_grace;
  hard_stop_at = cut_at + kHardStop;
  std::vector<Connection*> idle;
  for (auto& [id, c] : connections) {
    if (c->phase == Connection::Phase::kRead && !c->pending_output()) idle.push_back(c.get());
    c->close_after = true;
  }
  for (Connection* c : idle) close(*c);
}

void HttpLoop::Impl::sweep(Clock::time_point now) {
  if (!listening && !draining && listen_fd >= 0 && now >= accept_paused_until &&
      connections.size() < options.max_connections) {
    set_listening(true);
  }
  std::vector<Connection*> all;
  all.reserve(connections.size());
  for (auto& [id, c] : connections) all.push_back(c.get());
  for (Connection* c : all) {
    if (c->pending_output() && now - c->last_io > kWriteTimeout) {
      client_gone(*c);
    } else if (c->phase == Connection::Phase::kLinger) {
      if (now >= c->linger_until) close(*c);
    } else if (c->phase == Connection::Phase::kRead) {
      if (!c->parser.started()) {
        if (now - c->last_io > options.idle_timeout && !c->pending_output()) close(*c);
      } else if (!c->parser.head_done() ? now - c->request_start > options.header_timeout
                                        : now - c->last_io > options.body_timeout) {
        loop_error(*c, 408, "the request did not arrive in time");
        end_reply(*c, now);
        flush(*c, now);
      }
    }
  }
  if (!draining) return;
  if (now >= cut_at && !cut_sent) {
    cut_sent = true;
    for (auto& [id, c] : connections) {
      if (c->reply) c->reply->cut();
    }
  }
  if (now >= hard_stop_at) {
    for (Connection* c : all) {
      if (connections.count(c->id)) client_gone(*c);
    }
  }
}

void HttpLoop::Impl::close_mailbox() {
  workers.stop();
  for (Mailbox::Done& d : box->close()) {
    if (d.result.deferred) d.result.deferred->abandon();
  }
}

HttpLoop::HttpLoop(HttpLoopOptions options, HttpHooks hooks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(hooks))) {}

HttpLoop::~HttpLoop() = default;

StatusOr<int> HttpLoop::bind(const std::string& host, int port) {
  Impl& m = *impl_;
  MT_ASSIGN_OR_RETURN(ListenSocket socket, listen_tcp(host, port));
  m.listen_fd = socket.fd;
  m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  m.event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.event_fd < 0) return io_error("cannot set up the event loop: " + errno_text(errno));
  m.box->open(m.event_fd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.listen_fd, &ev);
  m.listening = true;
  ev.data.u64 = kWakeTag;
  epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.event_fd, &ev);
  return socket.port;
}

void HttpLoop::run() {
  Impl& m = *impl_;
  if (m.epoll_fd < 0) return;
  m.workers.start(std::max<uint32_t>(m.options.workers, 1));
  epoll_event events[256];
  m.last_sweep = Clock::now();
  while (!(m.draining && m.connections.empty())) {
    const int n = epoll_wait(m.epoll_fd, events, 256, static_cast<int>(kTick.count()));
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        m.accept_all(now);
      } else if (tag == kWakeTag) {
        m.take_mail(now);
      } else if (Connection* c = m.find(tag)) {
        m.on_socket(*c, events[i].events, now);
      }
    }
    if (now - m.last_sweep >= kTick) {
      m.sweep(now);
      m.last_sweep = now;
    }
    m.graveyard.clear();
  }
  m.close_mailbox();
}

void HttpLoop::stop() { impl_->box->request_stop(); }

}  // namespace mt::server
