#include "tandem/cli/parse_errors.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "tandem/base/parse_number.h"

namespace tandem::cli {
namespace {

// The option of `command` (or its parsed subcommands) a mistyped
// `token` most likely meant: a spelling TensorFlow, Keras or PyTorch users
// type, underscores for dashes, or a name at most two edits away.
std::string likely_option(const CLI::App& command, const std::string& token) {
  static const std::map<std::string, std::string> common = {
      {"--learning-rate", "--lr"},  {"--learning_rate", "--lr"}, {"--num-epochs", "--epochs"},
      {"--num_epochs", "--epochs"}, {"--epoch", "--epochs"},     {"--output-dir", "--output"},
      {"--model-dir", "--output"},  {"--out", "--output"},       {"--gpus", "--devices"},
      {"--workers", "--devices"},   {"--seeds", "--seed"}};
  const CLI::App* app = &command;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : app->get_subcommands()) {
      if (sub->parsed()) {
        app = sub;
        deeper = true;
        break;
      }
    }
  }
  std::vector<std::string> names;
  for (const CLI::Option* option : app->get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  }
  const auto known = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  std::string key = token.substr(0, token.find('='));
  if (auto it = common.find(key); it != common.end() && known(it->second)) return it->second;
  std::replace(key.begin(), key.end(), '_', '-');
  if (known(key)) return key;
  // Levenshtein distance, for typos.
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = 3;
  for (const std::string& name : names) {
    const size_t d = distance(key, name);
    if (d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace

std::string explain(const CLI::ParseError& e, const CLI::App& app) {
  const std::string what = e.what();
  const std::string repeated = ": At Most 1 required but received ";
  if (const size_t at = what.find(repeated); at != std::string::npos)
    return what.substr(0, at) + " is given more than once (give it once)";
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    std::string hints;
    std::istringstream tokens(what.substr(what.find(':') + 1));
    std::string token;
    while (tokens >> token) {
      if (token.rfind("--", 0) != 0) continue;
      const std::string option = likely_option(app, token);
      if (!option.empty()) hints += "; did you mean " + option + " for " + token + "?";
    }
    return what + hints;
  }
  return what;
}

void check_integer_values(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    for (const std::string& value : option->results()) {
      const bool fits = type == "INT" ? parse_number<int64_t>(value).has_value()
                                      : parse_number<uint64_t>(value).has_value();
      if (!fits) {
        throw CLI::ValidationError(
            option->get_name(),
            "'" + value + "' is not a whole number in the range of " + option->get_name());
      }
    }
  }
  for (const CLI::App* sub : app.get_subcommands()) check_integer_values(*sub);
}

}  // namespace tandem::cli
