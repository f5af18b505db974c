// Model files (TOML): parsed and checked, then built when they parse.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/nn/model_file.h"
#include "tandem/tensor/allocator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  try {
    const nn::ModelDefinition definition =
        nn::parse_model_definition(fuzz::as_text(data, size), "fuzz.toml");
    nn::build_model(definition);
  } catch (const Error&) {
  }
  // Freed parameters stay in the allocator's cache for reuse (up to 2 GiB
  // per device): random layer sizes would fill it, and the process's RSS
  // limit would report the cache rather than the parser.
  allocator_for(current_device()).release_cache();
  return 0;
}
