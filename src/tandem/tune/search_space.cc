#include "tandem/tune/search_space.h"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <cmath>

#include "tandem/base/detail/toml_document.h"
#include "tandem/base/error.h"

namespace tandem::tune {
namespace {

// The train flags a trial may set: what a recipe tunes, not where the run
// goes or how it is launched (the search owns --output, --epochs, --seed).
constexpr std::array<std::string_view, 21> kSearchable = {
    "lr",         "momentum",   "weight-decay", "warmup-epochs",     "optimizer",
    "schedule",   "min-lr",     "lr-gamma",     "lr-step-epochs",    "lr-scaling",
    "batch-size", "accumulate", "clip-norm",    "trust-coefficient", "label-smoothing",
    "precision",  "augment",    "huber-delta",  "reference-batch",   "micro-batch-size",
    "loss-scale"};

// Grids past this many points are a typo, not a plan.
constexpr int64_t kMaxTrials = 100000;

constexpr std::string_view kDistributions = "uniform, log_uniform, int or choice";

int64_t line_of(const toml::node& node) {
  return static_cast<int64_t>(node.source().begin.line);
}

template <typename... Args>
[[noreturn]] void fail(const std::string& source, int64_t line, const Args&... args) {
  if (line > 0) TANDEM_THROW(InvalidArgument, source, ":", line, ": ", args...);
  TANDEM_THROW(InvalidArgument, source, ": ", args...);  // about the whole file
}

std::string flag_text(const toml::node& value, const std::string& source) {
  if (const auto* s = value.as_string()) return s->get();
  if (const auto* i = value.as_integer()) return std::to_string(i->get());
  if (const auto* f = value.as_floating_point()) return fmt::format("{}", f->get());
  fail(source, line_of(value), "a choice is a string or a number");
}

double number(const toml::node& value, const std::string& source, std::string_view what) {
  if (const auto* i = value.as_integer()) return static_cast<double>(i->get());
  if (const auto* f = value.as_floating_point()) {
    if (!std::isfinite(f->get())) fail(source, line_of(value), what, " must be finite");
    return f->get();
  }
  fail(source, line_of(value), what, " must be a number");
}

int64_t integer(const toml::node& value, const std::string& source, std::string_view what) {
  const auto* i = value.as_integer();
  if (!i) fail(source, line_of(value), what, " must be an integer");
  return i->get();
}

std::string text(const toml::node& value, const std::string& source, std::string_view what) {
  const auto* s = value.as_string();
  if (!s) fail(source, line_of(value), what, " must be a string");
  return s->get();
}

Parameter parse_parameter(const std::string& name, const toml::node& node,
                          const std::string& source) {
  Parameter p{.name = name, .line = line_of(node)};
  const toml::table* spec = node.as_table();
  if (!spec) {
    fail(source, p.line, "parameter '", name, "' needs a distribution: { ", kDistributions,
         " = ... }");
  }
  bool has_distribution = false;
  for (const auto& [key, value] : *spec) {
    const std::string k(key.str());
    const int64_t line = static_cast<int64_t>(key.source().begin.line);
    if (k == "points") {
      p.points = integer(value, source, "points");
      // Capped here: the grid's values are made before its size is checked.
      if (p.points < 1 || p.points > kMaxTrials)
        fail(source, line, "points must be in [1, ", kMaxTrials, "], got ", p.points);
      continue;
    }
    if (k != "uniform" && k != "log_uniform" && k != "int" && k != "choice") {
      fail(source, line, "unknown distribution '", k, "' for '", name, "' (expected ",
           kDistributions, ", and points for a grid)");
    }
    if (has_distribution) fail(source, line, "parameter '", name, "' has two distributions");
    has_distribution = true;
    const toml::array* values = value.as_array();
    if (!values) fail(source, line, k, " takes an array");
    if (k == "choice") {
      p.distribution = Distribution::choice;
      if (values->empty()) fail(source, line, "empty choice for '", name, "'");
      for (const toml::node& v : *values) p.values.push_back(flag_text(v, source));
      continue;
    }
    if (values->size() != 2) fail(source, line, k, " takes [low, high]");
    p.distribution = k == "uniform"       ? Distribution::uniform
                     : k == "log_uniform" ? Distribution::log_uniform
                                          : Distribution::integer;
    if (p.distribution == Distribution::integer) {
      // Held as doubles, exact up to 2^53 (past it, values rounded and
      // their casts back overflowed).
      constexpr int64_t kExact = int64_t{1} << 53;
      const int64_t low = integer(*values->get(0), source, "int's low");
      const int64_t high = integer(*values->get(1), source, "int's high");
      if (low < -kExact || high > kExact)
        fail(source, line, "int range of '", name, "' must lie within [-2^53, 2^53]");
      p.low = static_cast<double>(low);
      p.high = static_cast<double>(high);
    } else {
      p.low = number(*values->get(0), source, "low");
      p.high = number(*values->get(1), source, "high");
    }
    if (!(p.low < p.high)) {
      fail(source, line, "empty range for '", name, "': low ", p.low, " is not below high ", p.high,
           " (fix the flag instead, or give a choice)");
    }
    if (p.distribution == Distribution::log_uniform && !(p.low > 0.0))
      fail(source, line, "log_uniform for '", name, "' needs low > 0, got ", p.low);
  }
  if (!has_distribution) {
    fail(source, p.line, "parameter '", name, "' needs a distribution (", kDistributions, ")");
  }
  if (p.points > 0 && p.distribution == Distribution::choice)
    fail(source, p.line, "points applies to a range, not a choice ('", name, "')");
  return p;
}

void parse_settings(const toml::table& table, const std::string& source, SearchSettings& s) {
  std::optional<std::string> mode;
  std::optional<int64_t> min_steps, max_steps;
  int64_t steps_line = 0, epochs_line = 0;
  for (const auto& [key, value] : table) {
    const std::string k(key.str());
    const int64_t line = static_cast<int64_t>(key.source().begin.line);
    if (k == "sampler") {
      s.sampler = text(value, source, k);
      if (s.sampler != "random" && s.sampler != "grid")
        fail(source, line, "unknown sampler '", s.sampler, "' (expected random or grid)");
    } else if (k == "scheduler") {
      s.scheduler = text(value, source, k);
      if (s.scheduler != "asha" && s.scheduler != "none")
        fail(source, line, "unknown scheduler '", s.scheduler, "' (expected asha or none)");
    } else if (k == "trials") {
      s.trials = integer(value, source, k);
      if (s.trials < 1 || s.trials > kMaxTrials)
        fail(source, line, "trials must be in [1, ", kMaxTrials, "], got ", s.trials);
    } else if (k == "reduction_factor") {
      s.reduction_factor = integer(value, source, k);
      if (s.reduction_factor < 2 || s.reduction_factor > 100)
        fail(source, line, "reduction_factor must be in [2, 100], got ", s.reduction_factor);
    } else if (k == "min_epochs" || k == "max_epochs") {
      const int64_t epochs = integer(value, source, k);
      if (epochs < 1 || epochs > 1000000)
        fail(source, line, k, " (a budget) must be in [1, 1000000] epochs, got ", epochs);
      (k == "min_epochs" ? s.min_epochs : s.max_epochs) = epochs;
      epochs_line = line;
    } else if (k == "min_steps" || k == "max_steps") {
      const int64_t steps = integer(value, source, k);
      if (steps < 1 || steps > 1000000000)
        fail(source, line, k, " (a budget) must be in [1, 1000000000] steps, got ", steps);
      (k == "min_steps" ? min_steps : max_steps) = steps;
      steps_line = line;
    } else if (k == "metric") {
      s.metric = text(value, source, k);
      if (!s.metric.starts_with("validation_") && !s.metric.starts_with("train_")) {
        fail(source, line, "metric '", s.metric,
             "' is not an epoch figure (validation_NAME or train_NAME, e.g. validation_accuracy)");
      }
    } else if (k == "mode") {
      mode = text(value, source, k);
      if (*mode != "max" && *mode != "min")
        fail(source, line, "unknown mode '", *mode, "' (expected max or min)");
    } else if (k == "target") {
      s.target = number(value, source, k);
    } else if (k == "seed") {
      const int64_t seed = integer(value, source, k);
      if (seed < 0) fail(source, line, "seed must be >= 0, got ", seed);
      s.seed = static_cast<uint64_t>(seed);
    } else {
      fail(source, line, "unknown setting '", k,
           "' in [search] (sampler, trials, scheduler, reduction_factor, min_epochs, "
           "max_epochs, min_steps, max_steps, metric, mode, target, seed)");
    }
  }
  if (steps_line > 0) {
    if (epochs_line > 0) {
      fail(source, std::max(steps_line, epochs_line),
           "budgets in epochs and in steps: give min_epochs and max_epochs, or min_steps and "
           "max_steps");
    }
    if (!min_steps || !max_steps)
      fail(source, steps_line, "budgets in steps need both min_steps and max_steps");
    if (*min_steps > *max_steps) {
      fail(source, steps_line, "min_steps ", *min_steps, " is above max_steps ", *max_steps);
    }
    if (*max_steps % *min_steps != 0) {
      fail(source, steps_line, "max_steps ", *max_steps, " is not a multiple of min_steps ",
           *min_steps, " (a trial's epochs are min_steps steps long)");
    }
    s.steps_per_epoch = *min_steps;
    s.min_epochs = 1;
    s.max_epochs = *max_steps / *min_steps;
  }
  s.maximize = mode ? *mode == "max" : s.metric.ends_with("accuracy");
  if (s.min_epochs > s.max_epochs) {
    fail(source, line_of(table), "min_epochs ", s.min_epochs, " is above max_epochs ",
         s.max_epochs);
  }
}

}  // namespace

std::string budget_point(int64_t steps_per_epoch, int64_t epochs) {
  return steps_per_epoch > 0 ? "step " + std::to_string(epochs * steps_per_epoch)
                             : "epoch " + std::to_string(epochs);
}

namespace {

// A parameter's grid points, as flag text.
std::vector<std::string> grid_points(const Parameter& p, const std::string& source) {
  if (p.distribution == Distribution::choice) return p.values;
  std::vector<std::string> points;
  if (p.distribution == Distribution::integer && p.points == 0) {
    if (p.high - p.low >= 1000)
      fail(source, p.line, "a grid over int [", p.low, ", ", p.high, "] needs points = N");
    for (double v = p.low; v <= p.high; v += 1.0) points.push_back(fmt::format("{}", int64_t(v)));
    return points;
  }
  if (p.points == 0) {
    fail(source, p.line, "a grid over the range of '", p.name,
         "' needs points = N (values spread over it)");
  }
  for (int64_t i = 0; i < p.points; ++i) {
    const double f = p.points == 1 ? 0.5 : static_cast<double>(i) / double(p.points - 1);
    if (p.distribution == Distribution::log_uniform) {
      points.push_back(fmt::format(
          "{:.6g}", std::exp(std::log(p.low) + f * (std::log(p.high) - std::log(p.low)))));
    } else if (p.distribution == Distribution::integer) {
      points.push_back(fmt::format("{}", std::llround(p.low + f * (p.high - p.low))));
    } else {
      points.push_back(fmt::format("{:.6g}", p.low + f * (p.high - p.low)));
    }
  }
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

// SplitMix64: a trial's stream from (seed, trial), the same on every platform.
uint64_t split_mix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double unit(uint64_t& state) {
  return static_cast<double>(split_mix(state) >> 11) * 0x1.0p-53;  // [0, 1)
}

std::string draw(const Parameter& p, uint64_t& state) {
  const double u = unit(state);
  switch (p.distribution) {
    case Distribution::uniform:
      return fmt::format("{:.6g}", p.low + u * (p.high - p.low));
    case Distribution::log_uniform:
      return fmt::format("{:.6g}",
                         std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low))));
    case Distribution::integer: {
      const double span = p.high - p.low + 1.0;
      return fmt::format("{}",
                         static_cast<int64_t>(p.low + std::min(std::floor(u * span), span - 1.0)));
    }
    case Distribution::choice:
      return p.values[std::min(p.values.size() - 1,
                               static_cast<size_t>(u * static_cast<double>(p.values.size())))];
  }
  return {};
}

}  // namespace

std::string describe(const TrialSettings& settings) {
  std::string text;
  for (const auto& [name, value] : settings)
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
  return text;
}

std::string searchable_flags() {
  std::string names;
  for (std::string_view n : kSearchable) {
    names.append(n);
    names.append(", ");
  }
  return names.append("model.KEY");
}

SearchSpace parse_search_space(std::string_view text_in, const std::string& source) {
  toml::table root;
  try {
    root = tandem::detail::parse_toml(text_in, source);
  } catch (const toml::parse_error& e) {
    fail(source, static_cast<int64_t>(e.source().begin.line), "invalid TOML: ", e.description());
  }
  SearchSpace space;
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    const int64_t line = static_cast<int64_t>(key.source().begin.line);
    if (k != "search" && k != "space")
      fail(source, line, "unknown table '", k, "' (a space file holds [search] and [space])");
    if (!node.is_table()) fail(source, line, "'", k, "' must be a table");
  }
  if (const toml::table* search = root["search"].as_table())
    parse_settings(*search, source, space.settings);
  const toml::table* params = root["space"].as_table();
  if (!params || params->empty())
    fail(source, 0, "no [space] to search (parameters such as lr = { log_uniform = [0.01, 1] })");
  for (const auto& [key, node] : *params) {
    const std::string name(key.str());
    const int64_t line = static_cast<int64_t>(key.source().begin.line);
    if (name == "model") {
      const toml::table* model = node.as_table();
      if (!model || model->empty())
        fail(source, line, "model holds the model's settings: model.KEY = { ... }");
      for (const auto& [model_key, spec] : *model)
        space.parameters.push_back(
            parse_parameter("model." + std::string(model_key.str()), spec, source));
      continue;
    }
    if (std::find(kSearchable.begin(), kSearchable.end(), name) == kSearchable.end()) {
      fail(source, line, "unknown parameter '", name, "' (a search sets ", searchable_flags(), ")");
    }
    space.parameters.push_back(parse_parameter(name, node, source));
  }
  // toml++ keeps a table's keys sorted: the file's order is the lines'.
  std::stable_sort(space.parameters.begin(), space.parameters.end(),
                   [](const Parameter& a, const Parameter& b) { return a.line < b.line; });
  SearchSettings& s = space.settings;
  if (s.sampler == "random" && s.trials == 0)
    fail(source, 0, "random sampling needs trials = N in [search]");
  if (s.sampler == "grid") {
    int64_t size = 1;
    for (const Parameter& p : space.parameters) {
      size *= static_cast<int64_t>(grid_points(p, source).size());
      if (size > kMaxTrials) fail(source, p.line, "the grid has more than ", kMaxTrials, " points");
    }
    if (s.trials != 0 && s.trials != size) {
      fail(source, 0, "trials = ", s.trials, " but the grid has ", size,
           " points (drop trials, or sample at random)");
    }
    s.trials = size;
  }
  return space;
}

std::vector<TrialSettings> sample_trials(const SearchSpace& space) {
  const SearchSettings& s = space.settings;
  std::vector<TrialSettings> trials;
  if (s.sampler == "random") {
    for (int64_t t = 0; t < s.trials; ++t) {
      uint64_t state = s.seed * 0x100000001B3ull + static_cast<uint64_t>(t);
      TrialSettings trial;
      for (const Parameter& p : space.parameters) trial.emplace_back(p.name, draw(p, state));
      trials.push_back(std::move(trial));
    }
    return trials;
  }
  std::vector<std::vector<std::string>> axes;
  for (const Parameter& p : space.parameters) axes.push_back(grid_points(p, "space"));
  for (int64_t t = 0; t < s.trials; ++t) {
    TrialSettings trial(space.parameters.size());
    int64_t rest = t;
    for (size_t i = axes.size(); i-- > 0;) {
      const auto n = static_cast<int64_t>(axes[i].size());
      trial[i] = {space.parameters[i].name, axes[i][static_cast<size_t>(rest % n)]};
      rest /= n;
    }
    trials.push_back(std::move(trial));
  }
  return trials;
}

std::vector<std::string> budget_arguments(int64_t epochs, int64_t max_epochs, uint64_t seed,
                                          int64_t steps_per_epoch) {
  std::vector<std::string> args = {"--epochs", std::to_string(max_epochs)};
  if (epochs < max_epochs) {
    args.push_back("--stop-after-epochs");
    args.push_back(std::to_string(epochs));
  }
  args.push_back("--seed");
  args.push_back(std::to_string(seed));
  if (steps_per_epoch > 0) {
    for (const std::string& a : {std::string("--steps-per-epoch"), std::to_string(steps_per_epoch),
                                 std::string("--repeat")})
      args.push_back(a);
  }
  return args;
}

std::vector<std::string> trial_arguments(const TrialSettings& settings) {
  std::vector<std::string> args;
  std::string model_options;
  for (const auto& [name, value] : settings) {
    if (name.starts_with("model.")) {
      if (!model_options.empty()) model_options.push_back(',');
      model_options.append(name, 6).append("=").append(value);
    } else {
      args.push_back("--" + name);
      args.push_back(value);
    }
  }
  if (!model_options.empty()) {
    args.push_back("--model-options");
    args.push_back(model_options);
  }
  return args;
}

}  // namespace tandem::tune
