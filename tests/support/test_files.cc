#include "support/test_files.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tandem/base/random.h"
#include "tandem/data/csv.h"
#include "tandem/data/example.h"
#include "tandem/data/feature_ops.h"
#include "tandem/data/image.h"
#include "tandem/data/tfrecord.h"

namespace tandem::testing {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string repeated(std::string_view piece, int times) {
  std::string text;
  text.reserve(piece.size() * static_cast<size_t>(times));
  for (int i = 0; i < times; ++i) text.append(piece);
  return text;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string write_regression_csv(const std::string& path, int64_t rows, int features,
                                 uint64_t seed) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::trunc);
  for (int i = 0; i < features; ++i) out << "x" << i << ",";
  out << "y\n";
  Generator g(seed);
  std::vector<float> x(static_cast<size_t>(features)), noise(1);
  for (int64_t r = 0; r < rows; ++r) {
    g.uniform(x.data(), features, -1.0f, 1.0f);
    g.normal(noise.data(), 1, 0.0f, 0.01f);
    double y = 0.5 + noise[0];
    for (int i = 0; i < features; ++i) {
      y += 0.1 * (i + 1) * x[i];
      out << x[i] << ",";
    }
    out << y << "\n";
  }
  return path;
}

data::Dataset regression_csv_dataset(const std::string& path, int features) {
  std::vector<std::string> inputs;
  for (int i = 0; i < features; ++i) {
    std::string name = "x";  // (not "x" + to_string: a false GCC 12 -Wrestrict at -O3)
    name += std::to_string(i);
    inputs.push_back(std::move(name));
  }
  return data::from_csv(path).map(data::concat_features(inputs, "x"));
}

std::vector<std::string> write_jpeg_tfrecords(const std::string& dir,
                                              const data::LabeledImages& images,
                                              const std::vector<int64_t>& shard_sizes) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  int64_t next = 0;
  const std::vector<float> pixels = images.images.to_floats();
  const std::vector<int32_t> labels = images.labels.to_ints();
  const int64_t per_image = 28 * 28;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    std::vector<std::string> records;
    for (int64_t i = 0; i < shard_sizes[s]; ++i, ++next) {
      // Back to u8 pixels: the normalisation undone.
      Tensor u8 = Tensor::empty(Shape{28, 28, 1}, DType::u8);
      auto* p = u8.data<uint8_t>();
      for (int64_t k = 0; k < per_image; ++k) {
        const float v =
            (pixels[next * per_image + k] * data::kFashionMnistStd + data::kFashionMnistMean) *
            255.0f;
        p[k] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
      data::Feature image{.kind = data::Feature::Kind::bytes_list};
      image.bytes.push_back(data::tensor_bytes(data::encode_jpeg(u8, 95)));
      data::Feature label{.kind = data::Feature::Kind::int64_list};
      label.int64s.push_back(labels[next]);
      data::Feature id{.kind = data::Feature::Kind::int64_list};
      id.int64s.push_back(next);
      records.push_back(data::encode_example({{"image", image}, {"label", label}, {"id", id}}));
    }
    const std::string path =
        (std::filesystem::path(dir) / ("train-" + std::to_string(s) + ".tfrecord")).string();
    data::write_tfrecord(path, records);
    paths.push_back(path);
  }
  return paths;
}

data::Dataset jpeg_tfrecord_dataset(const std::vector<std::string>& paths) {
  return data::Dataset::from_tfrecord(paths)
      .map(data::example_parser({{.name = "image", .dtype = DType::u8},
                                 {.name = "label", .dtype = DType::i32},
                                 {.name = "id", .dtype = DType::i32}}))
      .map(data::decode_image_fn("image", 1), {.num_parallel_calls = 2})
      .map(data::normalize({data::kFashionMnistMean}, {data::kFashionMnistStd}));
}

}  // namespace tandem::testing
