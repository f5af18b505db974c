#pragma once
// Map functions that reshape an element's features for a model: several
// scalar or vector features concatenated into one f32 vector (a CSV row's
// columns into a model's input), and features renamed or dropped.

#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Replaces the named features (any numeric dtype, any shape, flattened in
// order) by one f32 feature `output` of their total size. Throws
// InvalidArgument at call time naming a feature that is missing or bytes.
MapFn concat_features(std::vector<std::string> inputs, std::string output);

// Keeps only the named features, in that order (InvalidArgument naming a
// missing one).
MapFn select_features(std::vector<std::string> names);

}  // namespace tandem::data
