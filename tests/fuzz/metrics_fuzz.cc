// The metrics.jsonl reader of `tandem report`: lines of JSON of any shape,
// cut short, with missing, mistyped or absurd fields.
#include <filesystem>

#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/monitor/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::filesystem::path run = fuzz::scratch_dir() / "run";
  std::filesystem::create_directories(run);
  fuzz::as_file(data, size, "run/metrics.jsonl");
  try {
    monitor::write_report(run.string(), (fuzz::scratch_dir() / "report.html").string());
  } catch (const Error&) {
  }
  return 0;
}
