#pragma once
// What a run trains and validates on (tandem train, plan memory, tune):
// Fashion-MNIST, or the data specifications of --data and --validation-data.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/data/input_spec.h"

namespace tandem::cli {

struct RunOptions;

// What the run trains and validates on: Fashion-MNIST (the default) or the
// data specifications given with --data and --validation-data.
struct RunData {
  data::Dataset train = data::Dataset::range(0);
  std::optional<data::Dataset> validation;
  std::string description;                     // "Fashion-MNIST, 60000 train / 10000 test examples"
  std::map<std::string, std::string> summary;  // summary.json's config entries
  std::optional<data::PaddedBatchOptions> padding;
  std::string input = "image", label = "label";
  int64_t resident_bytes = 0;  // held in memory for the whole run (the memory plan's input)
  std::vector<std::string> class_names;  // an image folder's classes, in label order
};

// Points an image-folder spec at a model's classes (label i is classes[i]):
// a class folder the model does not know is refused, naming it, and known
// classes without a folder are a warning on stderr naming them and `what`
// (the flag). Does nothing for other formats or without classes.
void use_model_classes(data::InputSpec& spec, const std::vector<std::string>& classes,
                       const std::string& what);

// The data of --data/--validation-data (or Fashion-MNIST, with
// --data-dir, --train-examples and --test-examples), the training set
// shuffled from `seed`; refuses flags that do not go together.
RunData load_run_data(const RunOptions& o, uint64_t seed);

}  // namespace tandem::cli
