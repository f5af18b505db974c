// Writes the binary seed corpora of the fuzz harnesses into DIR/<harness>/:
// small valid files of each format, made with tandem's own writers (the
// text formats' seeds come from the docs and examples; scripts/fuzz.sh).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/data/example.h"
#include "tandem/data/idx.h"
#include "tandem/data/image.h"
#include "tandem/data/tfrecord.h"
#include "tandem/train/checkpoint.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string tensor_bytes(const Tensor& t) {
  return {static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes())};
}

Tensor pattern(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::u8);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>(i * 37 + i / 7);
  return t;
}

data::Example example(int64_t label) {
  data::Feature image{.kind = data::Feature::Kind::bytes_list};
  image.bytes = {"\x89PNG....", "second"};
  data::Feature labels{.kind = data::Feature::Kind::int64_list};
  labels.int64s = {label, -label, 1 << 20};
  data::Feature x{.kind = data::Feature::Kind::float_list};
  x.floats = {0.5f, -1.0f, 3.25f, 1e-3f};
  return {{"image", image}, {"label", labels}, {"tokens", labels}, {"x", x}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_seeds DIR\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* h : {"tfrecord", "example", "idx", "image", "checkpoint", "csv"})
    fs::create_directories(root / h);
  const std::string e0 = data::encode_example(example(3)), e1 = data::encode_example(example(7));
  write_bytes(root / "example" / "0", e0);
  write_bytes(root / "example" / "1", e1);
  data::write_tfrecord((root / "tfrecord" / "0").string(), {e0, e1, ""});
  data::write_tfrecord((root / "tfrecord" / "1").string(), {"a", std::string(300, 'x')});
  data::write_idx((root / "idx" / "images").string(), pattern(Shape{3, 4, 5}));
  data::write_idx((root / "idx" / "labels").string(), pattern(Shape{6}));
  data::write_idx((root / "idx" / "images.gz").string(), pattern(Shape{2, 3, 3}));
  write_bytes(root / "image" / "rgb.jpg", tensor_bytes(data::encode_jpeg(pattern(Shape{9, 7, 3}))));
  write_bytes(root / "image" / "grey.jpg",
              tensor_bytes(data::encode_jpeg(pattern(Shape{8, 8, 1}))));
  write_bytes(root / "image" / "rgb.png", tensor_bytes(data::encode_png(pattern(Shape{5, 6, 3}))));
  write_bytes(root / "image" / "grey.png", tensor_bytes(data::encode_png(pattern(Shape{4, 3, 1}))));
  train::Checkpoint checkpoint;
  checkpoint.metadata = {{"format", "tandem-trainer-2"}, {"epoch", "1"}};
  checkpoint.tensors = {{"w", Tensor::full(Shape{3, 2}, 0.25f)},
                        {"b", Tensor::full(Shape{2}, 1.0f).to(DType::bf16)}};
  train::save_checkpoint((root / "checkpoint" / "0").string(), checkpoint);
  write_bytes(root / "csv" / "0", "x,n,text\n1.5,2,hello\n-3e2,7,\"a, \"\"quoted\"\" b\"\n,4,z\n");
  write_bytes(root / "csv" / "1", "a;b\n1;2\n");
  return 0;
}
