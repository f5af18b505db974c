// Data specifications (TOML): parsed and checked (files are not opened).
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/input_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  try {
    data::parse_input_spec(fuzz::as_text(data, size), (fuzz::scratch_dir() / "spec.toml").string());
  } catch (const Error&) {
  }
  return 0;
}
