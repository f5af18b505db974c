// Checkpoint files: header, metadata, tensor table, sizes against the file.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string path = fuzz::as_file(data, size, "input.tckpt");
  try {
    train::load_checkpoint(path);
  } catch (const Error&) {
  }
  return 0;
}
