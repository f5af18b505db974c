#include "tandem/base/warnings.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace tandem {
namespace {

std::mutex& sink_mutex() {
  static std::mutex mutex;
  return mutex;
}

WarningSink& installed_sink() {
  static WarningSink sink;
  return sink;
}

}  // namespace

WarningSink set_warning_sink(WarningSink sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  return std::exchange(installed_sink(), std::move(sink));
}

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (installed_sink()) {
    installed_sink()(message);
    return;
  }
  std::fprintf(stderr, "tandem: warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace tandem
