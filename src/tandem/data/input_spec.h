#pragma once
// Input specifications: a user's training or validation data described in a
// TOML file (`tandem train --data train.toml`), from which an input pipeline
// of single examples is built. A spec names the files (TFRecord of
// tf.train.Example, CSV, IDX pair, or a folder of images with one sub-folder
// per class), the features to make of them and how (decode JPEG/PNG, raw
// bytes, int64/float lists of fixed or variable length; resize, centre crop,
// scale and normalise images; CSV columns concatenated into vectors), which
// feature the model reads and which the loss targets, and the shuffle
// buffer. docs/training.md has the format. Every mistake in a spec (an
// unknown key, a wrong type, a missing file, a feature the format cannot
// make) is an InvalidArgument naming the file, the line and the key.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// One feature of the examples and how it is made.
struct InputFeature {
  std::string name;    // in the examples
  std::string source;  // tfrecord: the Example key (default: name)
  // csv: the columns, concatenated into an f32 vector (one column: a scalar).
  std::vector<std::string> columns;
  // tfrecord: "bytes", "int64" or "float"; csv: "float" or "int".
  std::string type;
  // bytes: "image" (JPEG or PNG) or "raw" (a u8 vector of the bytes).
  std::string decode;
  int channels = 0;              // image: 1 or 3; 0: as stored
  std::vector<int64_t> shape;    // int64/float lists: fixed shape (empty: one value)
  bool variable_length = false;  // int64/float lists, raw bytes: padded per batch
  double padding = 0.0;          // the padding value of variable-length features
  // int64 lists: i32 (default) or f32; raw bytes: u8 (default), i32 or f32;
  // float lists and images: f32; CSV: f32, or i32 for type "int".
  DType dtype = DType::f32;
  std::vector<int64_t> resize;      // image: [height, width], bilinear
  std::vector<int64_t> crop;        // image: [height, width], centred
  std::optional<float> scale;       // image: multiplier (default 1/255 for 8-bit pixels)
  std::vector<float> mean, stddev;  // image: per channel or one value
};

struct InputSpec {
  std::string path;                             // the spec file (or the folder it was made from)
  std::string format;                           // "tfrecord", "csv", "idx", "image_folder"
  std::vector<std::string> files;               // tfrecord, csv: resolved paths in order
  Compression compression = Compression::none;  // tfrecord (auto-detected when "auto")
  bool detect_compression = true;
  std::string images, labels;  // idx
  std::string root;            // image_folder
  // image_folder: the classes of the model the examples are for, in label
  // order (ImageFolderOptions::known_classes); empty: every sub-folder,
  // sorted by name.
  std::vector<std::string> known_classes;
  int64_t shuffle = 0;          // buffer; 0: examples in file order
  bool cache = false;           // keep the decoded examples in memory after the first pass
  int parallel = kAutotune;     // map calls at once for decoding
  std::string input = "image";  // the feature the model reads
  std::string label = "label";  // the feature the loss and metrics read
  std::vector<InputFeature> features;

  // True when a feature has a variable length: batches must be padded.
  bool needs_padding() const;
  // How to pad batches (padding values of the variable-length features).
  PaddedBatchOptions padding() const;
};

// Parses a spec's text; `path` names it in errors and anchors relative
// file names and globs.
InputSpec parse_input_spec(std::string_view text, const std::string& path);
// Reads a spec from a .toml file, or makes one for a folder of images (one
// sub-folder per class, decoded as stored, scaled to [0, 1]). Throws
// IoError for a missing or unreadable path.
InputSpec read_input_spec(const std::string& path);

// The examples the spec describes, reshuffled every pass from `seed` when it
// asks for a shuffle. Throws IoError for files that cannot be read.
Dataset make_input(const InputSpec& spec, uint64_t seed);

}  // namespace tandem::data
