#include "tandem/data/fashion_mnist.h"

#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/data/idx.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {stem + ".gz", stem}) {
    const fs::path path = fs::path(dir) / candidate;
    std::error_code error;  // a name the OS refuses is a missing file, not an exception
    if (fs::is_regular_file(path, error)) return path.string();
  }
  TANDEM_THROW(IoError, "Fashion-MNIST file '", stem, "[.gz]' not found in '", dir, "'");
}

LabeledImages load_split(const std::string& dir, const std::string& prefix) {
  const std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  if (images.dtype() != DType::u8 || images.rank() != 3 || images.dim(1) != 28 ||
      images.dim(2) != 28) {
    TANDEM_THROW(IoError, "'", image_path, "' should hold u8 images (N, 28, 28), got ",
                 images.to_string());
  }
  if (labels.dtype() != DType::u8 || labels.rank() != 1) {
    TANDEM_THROW(IoError, "'", label_path, "' should hold u8 labels (N,), got ",
                 labels.to_string());
  }
  if (labels.dim(0) != images.dim(0)) {
    TANDEM_THROW(IoError, "'", image_path, "' has ", images.dim(0), " images but '", label_path,
                 "' has ", labels.dim(0), " labels");
  }
  const uint8_t* l = labels.data<uint8_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (l[i] >= kFashionMnistClasses) {
      TANDEM_THROW(IoError, "'", label_path, "': label ", static_cast<int>(l[i]), " at index ", i,
                   " is outside 0..", kFashionMnistClasses - 1);
    }
  }
  return {normalize_images(images, kFashionMnistMean, kFashionMnistStd), labels.to(DType::i32)};
}

}  // namespace

std::string default_fashion_mnist_dir() {
  return "/usr/share/datasets/fashion-mnist";
}

FashionMnist load_fashion_mnist(const std::string& dir) {
  MemoryCategoryScope input_memory(MemoryCategory::input);
  std::error_code error;  // a name the OS refuses (too long) is a missing folder
  if (!fs::is_directory(dir, error)) {
    TANDEM_THROW(IoError, "data directory '", dir,
                 "' does not exist (install Debian's "
                 "dataset-fashion-mnist package or pass the directory holding the IDX files)");
  }
  return {load_split(dir, "train"), load_split(dir, "t10k")};
}

Tensor normalize_images(const Tensor& u8_images, float mean, float stddev) {
  if (u8_images.dtype() != DType::u8 || u8_images.rank() < 3) {
    TANDEM_THROW(ShapeError, "normalize_images expects u8 (N, H, W[, 1]), got ",
                 u8_images.to_string());
  }
  const Shape& s = u8_images.shape();
  Tensor out = Tensor::empty(Shape{s[0], s[1], s[2], 1}, DType::f32);
  const uint8_t* in = u8_images.data<uint8_t>();
  float* o = out.data<float>();
  const float scale = 1.0f / (255.0f * stddev);
  const float shift = mean / stddev;
  parallel_for(out.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = static_cast<float>(in[i]) * scale - shift;
  });
  return out;
}

Dataset as_dataset(const LabeledImages& images) {
  return Dataset::from_tensors({{"image", images.images}, {"label", images.labels}});
}

}  // namespace tandem::data
