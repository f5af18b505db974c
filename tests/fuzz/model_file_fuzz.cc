// Model files (TOML): parsed and checked, then built when they parse and
// are small.
#include <cctype>
#include <string_view>

#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/nn/model_file.h"
#include "tandem/tensor/allocator.h"

namespace {

// Building is what a valid file is for, but a valid file may describe a
// large model (an embedding of width 7128 under attention: 200 million
// weights, 15 s to initialise under ASan). The size checks are the
// parser's; the harness builds only models whose every number is small.
bool small_numbers_only(std::string_view text) {
  int64_t value = 0;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      value = value * 10 + (c - '0');
      if (value > 1024) return false;
    } else {
      value = 0;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view text = fuzz::as_text(data, size);
  try {
    const nn::ModelDefinition definition = nn::parse_model_definition(text, "fuzz.toml");
    if (small_numbers_only(text)) nn::build_model(definition);
  } catch (const Error&) {
  }
  // Freed parameters stay in the allocator's cache for reuse (up to 2 GiB
  // per device): random layer sizes would fill it, and the process's RSS
  // limit would report the cache rather than the parser.
  allocator_for(current_device()).release_cache();
  return 0;
}
