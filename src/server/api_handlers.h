// The HTTP handlers of the OpenAI-compatible API: completions, chat completions, models, tokenize,
// detokenize. Each takes the shared ServerContext; errors become OpenAI error bodies.
#pragma once
#include <memory>

#include "server/http_types.h"
#include "server/server_context.h"

namespace dsinfer::server {

void handle_completions(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out,
                        bool chat);
void handle_models(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out);
// GET /v1/models/{model}: the served model, or 404 model_not_found.
void handle_model(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out);
void handle_tokenize(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out);
void handle_detokenize(ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out);

// 401 unless the request carries "Authorization: Bearer <api_key>" (no key configured: always true).
bool authorized(const ServerContext& ctx, const HttpRequest& req, const std::shared_ptr<Responder>& out);

}  // namespace dsinfer::server
