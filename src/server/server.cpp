// Server: the I/O context, listener, routes, request accounting (metrics + one log line per request),
// signal handling and the drain sequence.
#include "server/server.h"

#include <sys/resource.h>

#include <atomic>
#include <boost/asio.hpp>
#include <csignal>
#include <filesystem>

#include "core/log.h"
#include "model/model_config.h"
#include "server/api_error.h"
#include "server/api_handlers.h"
#include "server/completion_job.h"
#include "server/gpu_power_metrics.h"
#include "server/http_listener.h"
#include "server/resilience_http.h"
#include "server/router.h"
#include "server/server_context.h"

namespace dsinfer::server {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// The process's soft limit on open descriptors (a large value when unlimited).
int64_t fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return int64_t{1} << 20;
  return static_cast<int64_t>(r.rlim_cur);
}

// Wraps a session's Responder: records the status for dsinfer_requests_total and writes the request's log
// line when the request is over (the last reference goes away).
class TrackedResponder : public Responder {
 public:
  TrackedResponder(std::shared_ptr<Responder> inner, ServerContext& ctx, const HttpRequest& req,
                   uint64_t number, bool counted)
      : inner_(std::move(inner)),
        ctx_(ctx),
        method_(req.method),
        path_(req.path),
        remote_(req.remote),
        number_(number),
        counted_(counted),
        arrival_(Clock::now()) {}

  ~TrackedResponder() override {
    int status = status_;
    if (inner_->disconnected() && !ended_) status = 499;
    if (status == 0) status = 500;
    if (counted_) ctx_.metrics->count_request(status);
    const double ms =
        std::chrono::duration<double, std::milli>((ended_ ? end_ : Clock::now()) - arrival_).count();
    // Probes and scrapes (/health/*, /metrics) log at debug so that they do not drown the request log.
    const LogLevel level = counted_ ? ctx_.request_log_level : LogLevel::kDebug;
    if (log_level() >= level) {
      log_line(level, str_cat("request ", number_, " ", method_, " ", path_, " status=", status,
                              " duration_ms=", static_cast<int64_t>(ms), " remote=", remote_,
                              info_.empty() ? "" : " ", info_));
    }
  }

  void send(HttpResponse response) override {
    if (status_ == 0) status_ = response.status;
    ended_ = true;
    end_ = Clock::now();
    inner_->send(std::move(response));
  }
  void start_stream(int status, const std::string& content_type) override {
    if (status_ == 0) status_ = status;
    inner_->start_stream(status, content_type);
  }
  void write_chunk(std::string data) override { inner_->write_chunk(std::move(data)); }
  void end_stream() override {
    ended_ = true;
    end_ = Clock::now();
    inner_->end_stream();
  }
  void on_disconnect(std::function<void()> callback) override { inner_->on_disconnect(std::move(callback)); }
  bool disconnected() const override { return inner_->disconnected(); }
  void annotate(const std::string& info) override { info_ += (info_.empty() ? "" : " ") + info; }

 private:
  std::shared_ptr<Responder> inner_;
  ServerContext& ctx_;
  std::string method_, path_, remote_, info_;
  uint64_t number_;
  bool counted_;
  int status_ = 0;
  bool ended_ = false;
  Clock::time_point arrival_, end_;
};

std::string default_model_name(const std::string& model_dir) {
  std::filesystem::path p(model_dir);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() ? "dsinfer" : name;
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<net::io_context> ioc = std::make_shared<net::io_context>(1);
  std::unique_ptr<MetricsRegistry> owned_registry;
  MetricsRegistry* registry = nullptr;
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<ServerContext> ctx = std::make_unique<ServerContext>();
  Router router;
  std::shared_ptr<HttpListener> listener;
  std::unique_ptr<net::signal_set> signals;
  std::unique_ptr<net::steady_timer> drain_timer;
  Clock::time_point drain_deadline;
  std::atomic<bool> draining{false};  // read by the sessions (Connection: close while draining)
  bool drain_cancelled = false;
  bool stopped = false;
  int port = 0;
  uint64_t request_number = 0;

  void add_routes();
  void wait_signal();
  void begin_drain();
  void drain_tick();
  void finish_drain(Clock::time_point give_up);
  void stop_now();
};

Server::Server(ServeConfig config, MetricsRegistry* registry) : impl_(std::make_unique<Impl>()) {
  validate(config);
  Impl& m = *impl_;
  if (!registry) {
    m.owned_registry = std::make_unique<MetricsRegistry>();
    registry = m.owned_registry.get();
  }
  m.registry = registry;
  m.metrics = std::make_unique<ServerMetrics>(*registry);
  ServerContext& ctx = *m.ctx;
  ctx.config = std::move(config);
  ctx.model_name = ctx.config.server.served_model_name.empty()
                       ? default_model_name(ctx.config.engine.model_dir)
                       : ctx.config.server.served_model_name;
  ctx.metrics = m.metrics.get();
  ctx.request_log_level = parse_log_level(ctx.config.server.request_log_level);
  std::weak_ptr<net::io_context> weak_ioc = m.ioc;
  ctx.post = [weak_ioc](std::function<void()> fn) {
    if (auto ioc = weak_ioc.lock()) net::post(*ioc, std::move(fn));
  };
  net::io_context& ioc = *m.ioc;
  ctx.schedule = [&ioc](double seconds, std::function<void()> fn) -> std::function<void()> {
    auto timer = std::make_shared<net::steady_timer>(
        ioc, std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
    timer->async_wait([timer, fn = std::move(fn)](boost::system::error_code ec) {
      if (!ec) fn();
    });
    return [timer]() { timer->cancel(); };
  };
  ServerContext* ctx_ptr = &ctx;
  m.metrics->set_stats_source([ctx_ptr](EngineStats* out) {
    Engine* engine = ctx_ptr->engine.load();
    if (!engine) return false;
    *out = engine->stats();
    return true;
  });
  register_resilience_metrics(*registry, [ctx_ptr](EngineStats* out) {
    Engine* engine = ctx_ptr->engine.load();
    if (!engine) return false;
    *out = engine->stats();
    return true;
  });
#ifdef DSINFER_HAVE_CUDA
  if (const std::string why = register_visible_gpu_power_metrics(*registry, ctx.config.engine.device,
                                                                 ctx.config.engine.model_dir);
      !why.empty() && ctx.config.engine.device != "cpu")
    log_info("serve: no GPU power metrics (", why, ")");
#endif
  m.add_routes();
}

Server::~Server() {
  impl_->metrics->set_stats_source(nullptr);
  // Handlers still queued may reference sessions: destroy them while the context is complete.
  impl_->listener.reset();
  impl_->ctx->jobs.clear();
}

void Server::Impl::add_routes() {
  ServerContext& c = *ctx;
  auto api = [this](auto handler) {
    return [this, handler](const HttpRequest& req, std::shared_ptr<Responder> out) {
      if (!authorized(*ctx, req, out)) return;
      handler(req, out);
    };
  };
  router.add("GET", "/health/live", [&c](const HttpRequest&, std::shared_ptr<Responder> out) {
    if (auto failed = liveness_failure(c.engine.load())) return out->send(std::move(*failed));
    out->send(Health::live());
  });
  router.add("GET", "/health/ready", [&c](const HttpRequest&, std::shared_ptr<Responder> out) {
    if (c.health.ready()) {
      if (auto unready = readiness_failure(c.engine.load())) return out->send(std::move(*unready));
    }
    out->send(c.health.readiness());
  });
  router.add("GET", "/metrics", [this](const HttpRequest&, std::shared_ptr<Responder> out) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = registry->prometheus_text();
    out->send(std::move(r));
  });
  router.add("GET", "/v1/models", api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
               handle_models(c, req, out);
             }));
  router.add_prefix("GET", "/v1/models/", api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
                      handle_model(c, req, out);
                    }));
  router.add("POST", "/v1/completions", api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
               handle_completions(c, req, out, false);
             }));
  router.add("POST", "/v1/chat/completions",
             api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
               handle_completions(c, req, out, true);
             }));
  router.add("POST", "/tokenize", api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
               handle_tokenize(c, req, out);
             }));
  router.add("POST", "/detokenize", api([&c](const HttpRequest& req, std::shared_ptr<Responder> out) {
               handle_detokenize(c, req, out);
             }));
}

int Server::listen() {
  Impl& m = *impl_;
  auto session_config = std::make_shared<SessionConfig>();
  session_config->max_body_bytes = static_cast<uint64_t>(m.ctx->config.server.max_body_bytes);
  session_config->idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(m.ctx->config.server.idle_timeout_seconds * 1000.0));
  Impl* impl = &m;
  session_config->draining = [impl]() { return impl->draining.load(); };
  m.registry->add_collector([open = session_config->open_sessions, registry = m.registry]() {
    registry->gauge("dsinfer_http_open_connections", "").set(static_cast<double>(open->load()));
  });
  session_config->handler = [impl](const HttpRequest& req, std::shared_ptr<Responder> out) {
    const bool counted = req.path != "/metrics" && req.path.rfind("/health/", 0) != 0;
    auto tracked =
        std::make_shared<TrackedResponder>(std::move(out), *impl->ctx, req, ++impl->request_number, counted);
    impl->router.dispatch(req, tracked);
  };
  // The connection limit: past it a connection gets 503 too_many_connections (and Retry-After) unread.
  ConnectionLimit limit;
  limit.max_connections = static_cast<size_t>(effective_max_connections(m.ctx->config.server, fd_limit()));
  ApiError full(
      503,
      str_cat("too many open connections (the server's limit is ", limit.max_connections, "); retry later"),
      "service_unavailable", "", "too_many_connections");
  HttpResponse full_response = error_response(full);
  full_response.headers.emplace_back("Retry-After", retry_after(m.ctx->config.server));
  limit.reject_response = serialize_closing_response(full_response);
  Counter* rejected = &m.registry->counter("dsinfer_http_connections_rejected_total", "");
  limit.on_rejected = [rejected]() { rejected->inc(); };
  m.listener = std::make_shared<HttpListener>(*m.ioc, session_config, std::move(limit));
  m.port = m.listener->listen(m.ctx->config.server.host, m.ctx->config.server.port);
  m.listener->start_accepting();
  log_info("serve: listening on http://", m.ctx->config.server.host, ":", m.port, " (model \"",
           m.ctx->model_name, "\")");
  return m.port;
}

void Server::run() {
  auto guard = net::make_work_guard(*impl_->ioc);
  impl_->ioc->run();
}

void Server::set_engine(Engine* engine) {
  ServerContext* ctx = impl_->ctx.get();
  if (engine) {
    const ModelConfig& mc = engine->model_config();
    ctx->limits.vocab_size = static_cast<int32_t>(mc.vocab_size);
    ctx->limits.max_model_len = mc.max_position_embeddings;
    if (ctx->limits.max_model_len <= 0)
      ctx->limits.max_model_len = engine->tokenizer().model_max_length().value_or(4096);
    // A request longer than the KV cache can hold could only fail halfway: advertise and enforce the
    // smaller of the model's context and the cache's capacity (as a 400 before any work).
    const EngineStats st = engine->stats();
    const int64_t kv_tokens = st.kv_blocks_total * st.kv_block_size;
    if (kv_tokens > 0 && kv_tokens < ctx->limits.max_model_len) {
      log_warn("serve: the KV cache holds ", kv_tokens, " tokens, fewer than the model's context of ",
               ctx->limits.max_model_len, ": requests are limited to ", kv_tokens,
               " tokens (raise the KV budget to serve the whole context)");
      ctx->limits.max_model_len = static_cast<int32_t>(kv_tokens);
    }
  }
  ctx->engine.store(engine);
}

void Server::set_phase(Phase phase, const std::string& reason) {
  if (phase == Phase::kDraining) {
    impl_->ctx->health.set(phase, reason);
    return;
  }
  // The loader thread reports progress while the I/O thread may begin a drain: once draining, stay so.
  impl_->ctx->health.set_unless_draining(phase, reason);
}

void Server::handle_signals() {
  Impl& m = *impl_;
  m.signals = std::make_unique<net::signal_set>(*m.ioc, SIGTERM, SIGINT);
  m.wait_signal();
}

void Server::Impl::wait_signal() {
  signals->async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    if (draining) {
      log_warn("serve: second signal ", signo, ", stopping now");
      stop_now();
      return;
    }
    log_info("serve: signal ", signo, ", draining");
    begin_drain();
    wait_signal();
  });
}

void Server::drain() {
  Impl* impl = impl_.get();
  net::post(*impl->ioc, [impl]() { impl->begin_drain(); });
}

void Server::stop() {
  Impl* impl = impl_.get();
  net::post(*impl->ioc, [impl]() { impl->stop_now(); });
}

void Server::Impl::begin_drain() {
  if (draining || stopped) return;
  draining = true;
  ctx->health.set(Phase::kDraining, "the server is shutting down");
  if (listener) {
    listener->stop_accepting();
    listener->close_idle_sessions();
  }
  drain_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                      ctx->config.server.drain_timeout_seconds));
  drain_timer = std::make_unique<net::steady_timer>(*ioc);
  log_info("serve: draining ", ctx->jobs.size(), " in-flight requests (timeout ",
           ctx->config.server.drain_timeout_seconds, " s)");
  drain_tick();
}

void Server::Impl::drain_tick() {
  if (stopped) return;
  const Clock::time_point now = Clock::now();
  if (ctx->jobs.empty()) {
    finish_drain(now + std::chrono::seconds(2));
    return;
  }
  if (!drain_cancelled && now >= drain_deadline) {
    log_warn("serve: drain timeout, cancelling ", ctx->jobs.size(), " requests");
    drain_cancelled = true;
    auto jobs = ctx->jobs;
    for (auto& [n, job] : jobs) job->cancel_all("server shutting down");
    drain_deadline = now + std::chrono::seconds(5);
  } else if (drain_cancelled && now >= drain_deadline) {
    finish_drain(now);
    return;
  }
  drain_timer->expires_after(std::chrono::milliseconds(20));
  drain_timer->async_wait([this](boost::system::error_code ec) {
    if (!ec) drain_tick();
  });
}

// Lets the last responses flush (sessions close themselves after them), then stops the loop.
void Server::Impl::finish_drain(Clock::time_point give_up) {
  if (stopped) return;
  if (listener) listener->close_idle_sessions();
  if (!listener || listener->open_sessions() == 0 || Clock::now() >= give_up) {
    log_info("serve: drained");
    stop_now();
    return;
  }
  drain_timer->expires_after(std::chrono::milliseconds(20));
  drain_timer->async_wait([this, give_up](boost::system::error_code ec) {
    if (!ec) finish_drain(give_up);
  });
}

void Server::Impl::stop_now() {
  if (stopped) return;
  stopped = true;
  auto jobs = ctx->jobs;
  for (auto& [n, job] : jobs) job->cancel_all("server shutting down");
  ctx->jobs.clear();
  if (listener) {
    listener->stop_accepting();
    listener->close_all_sessions();
  }
  if (signals) {
    boost::system::error_code ec;
    signals->cancel(ec);
  }
  if (drain_timer) drain_timer->cancel();
  ioc->stop();
}

int Server::port() const {
  return impl_->port;
}
const std::string& Server::model_name() const {
  return impl_->ctx->model_name;
}
MetricsRegistry& Server::registry() {
  return *impl_->registry;
}
ServerMetrics& Server::metrics() {
  return *impl_->metrics;
}

}  // namespace dsinfer::server
