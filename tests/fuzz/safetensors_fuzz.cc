// safetensors files: the header length, the JSON header, dtypes, shapes and
// byte ranges against the file, then every tensor read.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/interop/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string path = fuzz::as_file(data, size, "input.safetensors");
  try {
    const interop::SafetensorsFile file(path);
    for (const interop::SafetensorsEntry& e : file.entries()) {
      try {
        file.read(e);
      } catch (const InvalidArgument&) {  // a dtype tandem has no type for
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
