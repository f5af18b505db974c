#include "tandem/cli/run_outputs.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/cli/commands.h"
#include "tandem/comm/launch.h"

namespace tandem::cli {

std::string default_output_dir(const std::string& model) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::filesystem::path base =
      std::filesystem::path("runs") / fmt::format("{}-{}", model, stamp);
  if (comm::launched_process_count() > 1) return base.string();
  std::error_code error;
  std::filesystem::create_directories("runs", error);
  for (int n = 1; n <= 1000; ++n) {
    const std::string name = n == 1 ? base.string() : fmt::format("{}-{}", base.string(), n);
    if (::mkdir(name.c_str(), 0777) == 0) return name;
    if (errno != EEXIST)
      TANDEM_THROW(IoError, "cannot create the run directory '", name, "': ", std::strerror(errno));
  }
  TANDEM_THROW(IoError, "runs/ holds 1000 runs named ", base.string(), "*: give --output");
}

std::pair<int64_t, int64_t> parse_trace_steps(const std::string& text) {
  if (text.empty()) return {0, 0};
  const auto number = [&](const std::string& part) -> int64_t {
    const std::optional<int64_t> value = parse_number<int64_t>(part);
    if (!value || *value < 1) {
      TANDEM_THROW(InvalidArgument,
                   "--trace-steps must be FIRST:LAST with 1 <= FIRST <= LAST (global steps), got '",
                   text, "'");
    }
    return *value;
  };
  const size_t colon = text.find(':');
  const int64_t first = number(text.substr(0, colon));
  const int64_t last = colon == std::string::npos ? first : number(text.substr(colon + 1));
  if (last < first) {
    TANDEM_THROW(InvalidArgument, "--trace-steps must be FIRST:LAST with FIRST <= LAST, got '",
                 text, "'");
  }
  return {first, last};
}

}  // namespace tandem::cli
