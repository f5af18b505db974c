// Checkpoint files: header, metadata, tensor table, sizes against the file,
// and what is read from the metadata (the model's spec and definition). The
// CRC-32 over the whole file stops almost every mutated input at once, so
// each input is also read with its last 4 bytes made the checksum of the
// rest: the readers behind the check see the mutations too.
#include <zlib.h>

#include <string>

#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/nn/model_file.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/model_factory.h"

namespace {

void read_checkpoint(const std::string& path) {
  using namespace tandem;
  try {
    const train::Checkpoint checkpoint = train::load_checkpoint(path);
    const train::ModelSpec spec = train::read_spec(checkpoint);
    if (!spec.definition.empty()) nn::parse_model_definition(spec.definition, spec.name);
  } catch (const Error&) {
  }
  try {
    train::read_checkpoint_metadata(path);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  read_checkpoint(fuzz::as_file(data, size, "input.tckpt"));
  if (size < 4) return 0;
  std::string resealed(reinterpret_cast<const char*>(data), size);
  const uLong crc =
      crc32(0, reinterpret_cast<const Bytef*>(resealed.data()), static_cast<uInt>(size - 4));
  for (int i = 0; i < 4; ++i) resealed[size - 4 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  read_checkpoint(
      fuzz::as_file(reinterpret_cast<const uint8_t*>(resealed.data()), size, "resealed.tckpt"));
  return 0;
}
