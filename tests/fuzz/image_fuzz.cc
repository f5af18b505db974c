// JPEG and PNG decoding (libjpeg-turbo, libpng): headers, dimensions against
// the pixel cap, truncated and corrupt streams; as stored and as grey or RGB.
#include <cstring>

#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/image.h"
#include "tandem/tensor/allocator.h"
#include "tandem/tensor/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  Tensor bytes = Tensor::empty(Shape{static_cast<int64_t>(size)}, DType::u8);
  if (size > 0) std::memcpy(bytes.raw_data(), data, size);
  for (int channels : {0, 1, 3}) {
    try {
      data::decode_image(bytes, channels);
    } catch (const Error&) {
    }
  }
  // The allocator keeps freed blocks for reuse (up to 2 GiB per device);
  // random image sizes would fill it and the process's RSS limit would
  // report the cache, not the decoder.
  allocator_for(current_device()).release_cache();
  return 0;
}
