// IDX files (MNIST's format): magic, dimensions, sizes against the bytes
// present; plain and gzip-compressed.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  // gzip's magic selects the compressed path, as for a real ".gz" file.
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string path = fuzz::as_file(data, size, gzip ? "input-idx.gz" : "input-idx");
  try {
    data::read_idx(path);
  } catch (const Error&) {
  }
  return 0;
}
