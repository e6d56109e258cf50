// Entry point of the DeepSeek-V3.2 model until its implementation lands: loading such a checkpoint is a
// clear error rather than a wrong model. (DeepSeek-V4 lives in deepseek_v4.cpp.)
#include "core/error.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_v32_model(const ModelConfig&, WeightLoader&, Backend&) {
  fail("model_type deepseek_v32 is recognised but its forward pass is not implemented in this build");
}

}  // namespace dsinfer
