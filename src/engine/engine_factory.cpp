// Engine::create: backend, model (real or dummy weights) and tokenizer for an EngineConfig.
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/backend_factory.h"
#include "core/env_choice.h"
#include "engine/engine_impl.h"
#include "engine/memory_plan.h"
#include "model/model.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_graph_model.h"
#endif

namespace dsinfer {

std::unique_ptr<Engine> Engine::create(const EngineConfig& config) {
  std::unique_ptr<Backend> backend = make_backend(config.device, config.model_dir, config.cuda_arch);
  LoadOptions options;
  options.dummy_weights = config.dummy_weights;
  std::unique_ptr<Model> model = load_model(config.model_dir, *backend, options);
#ifdef DSINFER_HAVE_CUDA
  const bool graphs = config.cuda_graphs && env_switch("DSINFER_CUDA_GRAPHS", true);
  if (graphs && backend->device() == Device::kCuda && model->graph_capturable()) {
    CudaGraphOptions graph_options;
    graph_options.max_batch = cuda_graph_batch_limit(config.cuda_graph_max_batch_size, config.max_batch_size);
    model = std::make_unique<CudaGraphModel>(std::move(model), static_cast<CudaBackend&>(*backend),
                                             graph_options);
  }
#endif
  std::optional<Tokenizer> tokenizer;
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(config.model_dir) / "tokenizer.json") ||
      fs::exists(fs::path(config.model_dir) / "tokenizer.json.gz")) {
    tokenizer = Tokenizer::load(config.model_dir);
  }
  return make_engine(config, std::move(backend), std::move(model), std::move(tokenizer));
}

}  // namespace dsinfer
