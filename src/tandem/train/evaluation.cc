#include "tandem/train/evaluation.h"

#include <algorithm>
#include <filesystem>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/kernels/loss.h"

namespace tandem::train {

EvalSums evaluate_rows(nn::Module& model, const data::LabeledImages& data, int64_t first,
                       int64_t last, int64_t batch_size) {
  if (batch_size < 1)
    TANDEM_THROW(InvalidArgument, "evaluation batch size must be at least 1, got ", batch_size);
  EvalSums sums;
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  struct RestoreMode {
    nn::Module& model;
    bool training;
    ~RestoreMode() { model.train(training); }
  } restore{model, was_training};
  for (int64_t begin = first; begin < last; begin += batch_size) {
    const int64_t end = std::min(last, begin + batch_size);
    const Tensor x = data.images.slice(begin, end).to(current_device());
    const Tensor y = data.labels.slice(begin, end);
    const Variable logits = model.forward(Variable(x));
    sums.loss += static_cast<double>(softmax_cross_entropy(logits, y).value().item()) *
                 static_cast<double>(end - begin);
    sums.correct += kernels::count_correct(logits.value(), y);
  }
  return sums;
}

Checkpoint load_trainer_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) TANDEM_THROW(IoError, "no checkpoint at '", path, "'");
  Checkpoint c = load_checkpoint(path);
  if (c.metadata.count("format") == 0 || c.meta("format") != kTrainerCheckpointFormat) {
    TANDEM_THROW(IoError, "'", path, "' is not a trainer checkpoint (format ",
                 c.metadata.count("format") ? c.meta("format") : std::string("missing"), ")");
  }
  return c;
}

void load_model_state(const Checkpoint& checkpoint, nn::Module& model) {
  for (auto& [name, p] : model.named_parameters()) {
    Tensor value = p.value();
    checkpoint.load_into("model." + name, value);
    p.mark_modified();
  }
  for (auto& [name, t] : model.named_buffers()) checkpoint.load_into("buffer." + name, *t);
}

}  // namespace tandem::train
