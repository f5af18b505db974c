#include "tandem/cli/resume_arguments.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tandem/base/error.h"
#include "tandem/base/utf8.h"
#include "tandem/cli/commands.h"

namespace tandem::cli {
namespace {

// The layout's and the update rule's flags belong to the strategy they
// were given for: a resume into another strategy does not inherit them.
const std::set<std::string>& strategy_bound() {
  static const std::set<std::string> names = {"--devices",
                                              "--threads",
                                              "--allow-oversubscription",
                                              "--ps",
                                              "--max-staleness",
                                              "--backup-workers",
                                              "--staleness-aware-lr",
                                              "--sync-every",
                                              "--average-optimizer-state",
                                              "--slow-replica"};
  return names;
}

// What a resume may change: how long it trains, where and how it reports,
// and how the work is spread (strategies resume exactly), with the flags
// bound to the strategy.
bool changeable(const std::string& name) {
  static const std::set<std::string> names = {"--epochs",
                                              "--output",
                                              "--resume",
                                              "--quiet",
                                              "--no-monitor",
                                              "--metrics-every",
                                              "--trace-steps",
                                              "--tensorboard",
                                              "--no-tensorboard",
                                              "--checkpoint-every",
                                              "--stop-after-epochs",
                                              "--strategy",
                                              "--device",
                                              "--collective-timeout",
                                              "--peer-timeout",
                                              "--prefetch",
                                              "--input-parallel",
                                              "--memory-limit",
                                              "--no-memory-plan"};
  return names.count(name) > 0 || strategy_bound().count(name) > 0;
}

// Flags that choose one of a few exclusive outputs: given now, they
// replace every recorded one of the group (the recorded --tensorboard DIR
// and a new --no-tensorboard together were refused as a contradiction).
const std::vector<std::set<std::string>>& exclusive_groups() {
  static const std::vector<std::set<std::string>> groups = {
      {"--tensorboard", "--no-tensorboard", "--no-monitor"}};
  return groups;
}

bool replaced_by_its_group(const CLI::App& now, const std::string& name) {
  for (const std::set<std::string>& group : exclusive_groups()) {
    if (!group.count(name)) continue;
    for (const std::string& other : group) {
      const CLI::Option* given = now.get_option_no_throw(other);
      if (given != nullptr && given->count() > 0) return true;
    }
  }
  return false;
}

// The value of `name` given to `app`, or empty.
std::vector<std::string> value_of(const CLI::App& app, const std::string& name) {
  const CLI::Option* option = app.get_option_no_throw(name);
  return option != nullptr && option->count() > 0 ? option->results() : std::vector<std::string>();
}

// Flags of one invocation, never taken from the recorded arguments: how
// much this command prints or traces, where it pauses, and the starting
// weights (a resume starts from the checkpoint's; given now, the run's own
// check refuses them).
const std::set<std::string>& per_invocation() {
  static const std::set<std::string> names = {"--quiet", "--trace-steps", "--stop-after-epochs",
                                              "--init-from", "--non-strict"};
  return names;
}

std::string joined(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) out += (out.empty() ? "" : " ") + v;
  return out;
}

// Whether the option's value names a file or folder (--model: a model
// file, not a built-in's name).
bool names_a_path(const std::string& name, const std::string& value) {
  if (name == "--data" || name == "--validation-data" || name == "--data-dir" ||
      name == "--tensorboard" || name == "--init-from")
    return true;
  return name == "--model" && is_model_file(value);
}

// The option's values with paths made absolute: a run records them so, and
// a resume compares them so, which lets it resume from any directory (with
// the paths as typed, a run started with --data data/x.toml resumed only
// from the directory it started in).
std::vector<std::string> values_of(const CLI::Option& option) {
  std::vector<std::string> values = option.results();
  for (std::string& v : values) {
    if (!v.empty() && names_a_path(option.get_name(), v))
      v = std::filesystem::absolute(v).lexically_normal().string();
  }
  return values;
}

void append(std::vector<std::string>& args, const CLI::Option& option) {
  for (const std::string& value : values_of(option))
    args.push_back(option.get_name() + "=" + value);
}

}  // namespace

std::vector<std::string> given_arguments(const CLI::App& command) {
  std::vector<std::string> args;
  for (const CLI::Option* option : command.get_options()) {
    const std::string name = option->get_name();
    if (option->count() == 0 || name == "--resume" || name == "--output") continue;
    append(args, *option);
  }
  // Recorded as JSON in every checkpoint: refused now rather than at the
  // first save.
  for (const std::string& arg : args) {
    if (!is_utf8(arg)) {
      TANDEM_THROW(InvalidArgument, "argument '", escape_invalid_utf8(arg),
                   "' is not UTF-8, which a run's records (JSON) need: rename the file or folder");
    }
  }
  return args;
}

std::optional<std::vector<std::string>> recorded_arguments(
    const std::map<std::string, std::string>& metadata, const std::string& checkpoint) {
  const auto it = metadata.find("arguments");
  if (it == metadata.end()) return std::nullopt;
  try {
    return nlohmann::json::parse(it->second).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "checkpoint '", checkpoint, "' has malformed arguments: ", e.what());
  }
}

std::vector<std::string> resume_arguments(const CLI::App& now, const CLI::App& recorded) {
  const bool new_strategy = !value_of(now, "--strategy").empty() &&
                            value_of(now, "--strategy") != value_of(recorded, "--strategy");
  std::vector<std::string> args;
  for (const CLI::Option* option : recorded.get_options()) {
    const std::string name = option->get_name();
    if (option->count() == 0 || name == "--resume" || name == "--output") continue;
    const CLI::Option* given = now.get_option_no_throw(name);
    // A changeable option given now replaces the recorded one (below).
    if (changeable(name) && given != nullptr && given->count() > 0) continue;
    if (replaced_by_its_group(now, name)) continue;
    if (per_invocation().count(name)) continue;
    if (new_strategy && strategy_bound().count(name)) continue;
    append(args, *option);
  }
  for (const CLI::Option* option : now.get_options()) {
    const std::string name = option->get_name();
    if (option->count() == 0 || name == "--resume" || name == "--output") continue;
    if (changeable(name) || per_invocation().count(name)) {
      append(args, *option);
      continue;
    }
    const CLI::Option* before = recorded.get_option_no_throw(name);
    const std::vector<std::string> was =
        before != nullptr ? values_of(*before) : std::vector<std::string>();
    if (values_of(*option) != was) {
      TANDEM_THROW(InvalidArgument, "--resume takes every setting from the run, which was started ",
                   was.empty() ? "without " + name : "with " + name + " " + joined(was),
                   "; this command gives ", name, " ", joined(values_of(*option)),
                   " (a resume may change only --epochs, the output and monitoring flags, the "
                   "strategy, devices, threads, timeouts and input parallelism; to change ",
                   name, ", start a new run in another --output)");
    }
  }
  return args;
}

}  // namespace tandem::cli
