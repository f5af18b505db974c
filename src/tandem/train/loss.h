#pragma once
// Losses for the Trainer and for custom training loops: a function of the
// model's outputs and the batch that returns per-example losses, shape
// (rows,) f32. The engine sums them and divides by the global batch's row
// count (tf.distribute's compute_average_loss), so the loss is the mean per
// example over the global batch whatever the replica count. Built-in losses
// take their targets from a named batch feature ("label" by default).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/autograd/variable.h"
#include "tandem/data/element.h"

namespace tandem::train {

struct LossOptions {
  std::string labels = "label";  // the batch feature holding the targets
  // softmax_cross_entropy: positions whose label is this contribute nothing
  // (per example, the mean is over the other positions).
  std::optional<int32_t> ignore_index;
  double label_smoothing = 0.0;  // softmax_cross_entropy, in [0, 1)
  double delta = 1.0;            // huber, > 0
};

struct Loss {
  // Identifies the loss and its settings ("softmax_cross_entropy",
  // "huber(delta=2)"): recorded in checkpoints, where a resume with another
  // loss is refused, and in summary.json.
  std::string name;
  std::function<Variable(const Variable& outputs, const data::Element& batch)> per_example;
  // A built-in loss's kind and options (what make_loss rebuilds it from);
  // "custom" for a program's own loss.
  std::string kind = "custom";
  LossOptions options;
};

// softmax_cross_entropy: logits (N, ..., K) against i32 class labels (N, ...).
// binary_cross_entropy: logits against targets in [0, 1] of the same shape.
// mean_squared_error, mean_absolute_error, huber: predictions against
// targets with the same elements per example (N, ...).
// Keras's names are taken too (canonical_loss_name). Throws InvalidArgument
// naming the known losses for another name, and for options out of range.
Loss make_loss(std::string_view name, const LossOptions& options = {});
std::vector<std::string> loss_names();
// tandem's name for one of Keras's (sparse_categorical_crossentropy,
// binary_crossentropy, mse, mae); any other name as it is.
std::string canonical_loss_name(std::string_view name);

// A built-in loss as JSON ({"kind": ..., "labels": ..., ...}) and back, for
// checkpoints; loss_from_json throws InvalidArgument for a custom loss or
// bad JSON.
std::string loss_to_json(const Loss& loss);
Loss loss_from_json(const std::string& json);

}  // namespace tandem::train
