#pragma once
// A hyperparameter search's space and settings (`tandem tune search
// --space FILE`), read from TOML:
//
//   [search]
//   sampler = "grid"          # or "random" (then trials = N)
//   scheduler = "asha"        # or "none": every trial to max_epochs
//   min_epochs = 1            # the first rung's budget
//   max_epochs = 9            # the last rung's
//   (or min_steps = 300 and max_steps = 2700: budgets in steps, a multiple
//   of min_steps; each trial then trains epochs of min_steps steps over
//   repeated data, `--steps-per-epoch min_steps --repeat`)
//   reduction_factor = 3      # ASHA's eta
//   metric = "validation_accuracy"   # an entry of summary.json's history
//   mode = "max"              # default: max for accuracies, min otherwise
//   target = 0.88             # optional: say whether the best reached it
//
//   [space]
//   lr = { log_uniform = [0.01, 1.0], points = 3 }
//   weight-decay = { uniform = [0.0, 0.001], points = 3 }
//   batch-size = { choice = [64, 128, 256] }
//   model.width = { int = [64, 512] }
//
// A parameter is a `tandem train` flag without its dashes, or model.KEY
// for a built-in model's setting (--model-options). A trial is one value
// per parameter: drawn (random; seeded per trial) or one point of the grid
// (choices, integer ranges, and `points` values spread over a range: evenly,
// or evenly in log for log_uniform).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::tune {

enum class Distribution { uniform, log_uniform, integer, choice };

struct Parameter {
  std::string name;  // a train flag (lr) or model.KEY
  Distribution distribution = Distribution::uniform;
  double low = 0.0, high = 0.0;     // the ranges (integer: inclusive)
  std::vector<std::string> values;  // choice, as flag text
  int64_t points = 0;               // grid points over a range (0: unset)
  int64_t line = 0;                 // in the space file
};

struct SearchSettings {
  std::string sampler = "random";  // random, grid
  int64_t trials = 0;              // random: required; grid: the grid's size
  std::string scheduler = "asha";  // asha, none
  int64_t reduction_factor = 3;
  // Budgets in epochs; with steps_per_epoch > 0 (budgets in steps: min_steps
  // and max_steps), an epoch of the search is that many steps.
  int64_t min_epochs = 1;
  int64_t max_epochs = 9;
  int64_t steps_per_epoch = 0;
  std::string metric = "validation_accuracy";
  bool maximize = true;
  std::optional<double> target;
  uint64_t seed = 0;  // trial t trains with seed + t and draws its values from it
};

struct SearchSpace {
  SearchSettings settings;
  std::vector<Parameter> parameters;
};

// One trial's values: (parameter, flag text) in the space's order.
using TrialSettings = std::vector<std::pair<std::string, std::string>>;

// Parses a space file's text; InvalidArgument naming `source`, the line and
// the problem (unknown key, parameter or distribution, a wrong type, an
// empty range, a zero budget, a grid over a range without points).
SearchSpace parse_search_space(std::string_view text, const std::string& source);

// The trials the settings ask for: settings.trials random draws, or every
// point of the grid (the first parameter varying slowest). Deterministic.
std::vector<TrialSettings> sample_trials(const SearchSpace& space);

// A trial's settings as `tandem train` arguments ("--lr", "0.1", ...; the
// model.KEY ones joined into one --model-options).
std::vector<std::string> trial_arguments(const TrialSettings& settings);

// A trial's budget and seed as `tandem train` arguments: a run of
// max_epochs (the schedule spans them) stopped after `epochs` when fewer,
// epochs of steps_per_epoch steps over repeated data when that is > 0.
// What a trial runs with, and what reproduces it.
std::vector<std::string> budget_arguments(int64_t epochs, int64_t max_epochs, uint64_t seed,
                                          int64_t steps_per_epoch);

// "epoch 3", or with budgets in steps (steps_per_epoch > 0) "step 900":
// where `epochs` of the search's end, for people to read.
std::string budget_point(int64_t steps_per_epoch, int64_t epochs);

// "lr=0.1 batch-size=256": a trial's settings for people to read.
std::string describe(const TrialSettings& settings);

// The parameter names a space may search, for messages.
std::string searchable_flags();

}  // namespace tandem::tune
