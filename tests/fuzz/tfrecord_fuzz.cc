// TFRecord framing: lengths, both CRCs, truncation; counted and read.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/dataset.h"
#include "tandem/data/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string path = fuzz::as_file(data, size, "input.tfrecord");
  try {
    data::count_tfrecord_records(path);
  } catch (const Error&) {
  }
  try {
    data::Iterator it = data::Dataset::from_tfrecord({path}).iterator();
    while (it.next()) {
    }
  } catch (const Error&) {
  }
  return 0;
}
