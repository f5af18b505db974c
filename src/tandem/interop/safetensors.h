#pragma once
// safetensors files (Hugging Face's format for weights, what PyTorch users
// save with safetensors.torch.save_file): a little-endian u64 header length,
// a JSON header naming each tensor's dtype, shape and byte range in the data
// region (and an optional "__metadata__" map of strings), then the raw
// little-endian tensor bytes, packed without holes.
//
// Reading checks the whole header against the file before a tensor is read:
// the header length against the file size and a 100 MB cap (the reference
// implementation's), every dtype known, every shape's byte count equal to
// its range, the ranges in the data region, covering it exactly with no
// overlap or hole. A file that passes cannot make the reader allocate more
// than it holds; the header is read without a JSON tree
// (detail/safetensors_header.h), so one that fails cannot either (beyond a
// small multiple for its tensor list).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::interop {

// A tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the file's name for it: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range in the data region
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Opens and checks the file; throws IoError naming the file and the
  // problem (missing, truncated, a corrupt or inconsistent header).
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  // In the order of their bytes in the file.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The entry with this name, or null.
  const SafetensorsEntry* find(const std::string& name) const;

  // The tensor's values in its own dtype, for the dtypes tandem has (F32,
  // BF16, F16, I32, U8, I64); InvalidArgument naming the tensor for others
  // (F64, U64, ...). IoError when the file changed under the reader.
  Tensor read(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes the tensors (contiguous, on the CPU, in any tandem dtype) with
// their names, in the given order, and the metadata as "__metadata__";
// atomically (a temporary renamed into place). InvalidArgument for a name
// given twice, empty, or "__metadata__"; IoError when it cannot be written.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The safetensors name of a tandem dtype ("F32") and the byte size of a
// safetensors dtype name (0: unknown).
std::string safetensors_dtype(DType dtype);
size_t safetensors_dtype_size(const std::string& name);

}  // namespace tandem::interop
