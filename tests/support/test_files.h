#pragma once
// Training data written as files the way users bring it: a CSV of features
// and a target for regression, and Fashion-MNIST as TFRecord shards of JPEG
// images (tf.train.Example {"image": bytes, "label": int64}), with the input
// pipelines that read them back; and raw or gzip bytes for the bad-file tests.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"

namespace tandem::testing {

// Writes `bytes` to `path`, replacing it.
void write_bytes(const std::string& path, const std::string& bytes);
// `piece` `times` times over (crafted text for the bad-file tests).
std::string repeated(std::string_view piece, int times);
// Writes `bytes` gzip-compressed to `path` (a test failure when zlib fails).
void write_gz(const std::string& path, const std::string& bytes);

// A CSV with a header "x0,...,x{features-1},y" and `rows` rows: x uniform in
// [-1, 1], y = sum_i (i + 1) * 0.1 * x_i + 0.5 + small noise. Returns the path.
std::string write_regression_csv(const std::string& path, int64_t rows, int features,
                                 uint64_t seed);
// Its examples as {"x": f32 (features,), "y": f32 ()}.
data::Dataset regression_csv_dataset(const std::string& path, int features);

// The images of `images` in order, one TFRecord file per entry of
// `shard_sizes` (consecutive runs of images), as JPEGs (quality 95) with
// their label and their index as "id". Returns the paths.
std::vector<std::string> write_jpeg_tfrecords(const std::string& dir,
                                              const data::LabeledImages& images,
                                              const std::vector<int64_t>& shard_sizes);
// Their examples as {"image": f32 (28, 28, 1) normalised as Fashion-MNIST,
// "label": i32 (), "id": i32 ()}, decoded in a parallel map.
data::Dataset jpeg_tfrecord_dataset(const std::vector<std::string>& paths);

}  // namespace tandem::testing
