// Writes the binary seed corpora of the fuzz harnesses into DIR/<harness>/:
// small valid files of each format, made with tandem's own writers (the
// text formats' seeds come from the docs and examples; scripts/fuzz.sh).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/data/element.h"
#include "tandem/data/example.h"
#include "tandem/data/idx.h"
#include "tandem/data/image.h"
#include "tandem/data/tfrecord.h"
#include "tandem/interop/safetensors.h"
#include "tandem/train/checkpoint.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
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
  for (const char* h :
       {"tfrecord", "example", "idx", "image", "checkpoint", "csv", "metrics", "safetensors"})
    fs::create_directories(root / h);
  const std::string e0 = data::encode_example(example(3)), e1 = data::encode_example(example(7));
  write_bytes(root / "example" / "0", e0);
  write_bytes(root / "example" / "1", e1);
  data::write_tfrecord((root / "tfrecord" / "0").string(), {e0, e1, ""});
  data::write_tfrecord((root / "tfrecord" / "1").string(), {"a", std::string(300, 'x')});
  data::write_idx((root / "idx" / "images").string(), pattern(Shape{3, 4, 5}));
  data::write_idx((root / "idx" / "labels").string(), pattern(Shape{6}));
  data::write_idx((root / "idx" / "images.gz").string(), pattern(Shape{2, 3, 3}));
  write_bytes(root / "image" / "rgb.jpg",
              data::tensor_bytes(data::encode_jpeg(pattern(Shape{9, 7, 3}))));
  write_bytes(root / "image" / "grey.jpg",
              data::tensor_bytes(data::encode_jpeg(pattern(Shape{8, 8, 1}))));
  write_bytes(root / "image" / "rgb.png",
              data::tensor_bytes(data::encode_png(pattern(Shape{5, 6, 3}))));
  write_bytes(root / "image" / "grey.png",
              data::tensor_bytes(data::encode_png(pattern(Shape{4, 3, 1}))));
  train::Checkpoint checkpoint;
  checkpoint.metadata = {{"format", "tandem-trainer-2"}, {"epoch", "1"}};
  checkpoint.tensors = {{"w", Tensor::full(Shape{3, 2}, 0.25f)},
                        {"b", Tensor::full(Shape{2}, 1.0f).to(DType::bf16)}};
  train::save_checkpoint((root / "checkpoint" / "0").string(), checkpoint);
  interop::write_safetensors((root / "safetensors" / "0").string(),
                             {{"w", Tensor::full(Shape{3, 2}, 0.25f)},
                              {"b", Tensor::full(Shape{2}, 1.0f).to(DType::bf16)},
                              {"n", Tensor::zeros(Shape{}, DType::i32)},
                              {"e", Tensor::empty(Shape{0, 4})}},
                             {{"format", "pt"}});
  // An I64 tensor, as PyTorch writes BatchNorm's num_batches_tracked.
  const std::string header = R"({"c":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  write_bytes(root / "safetensors" / "1", file + header + std::string(8, '\0'));
  write_bytes(root / "csv" / "0", "x,n,text\n1.5,2,hello\n-3e2,7,\"a, \"\"quoted\"\" b\"\n,4,z\n");
  write_bytes(root / "csv" / "1", "a;b\n1;2\n");
  // metrics.jsonl as the Monitor writes it (fixed figures, so that smoke
  // runs start from the same bytes every time).
  const std::string step =
      R"({"type":"step","epoch":1,"step":STEP,"global_step":STEP,"time":0.05,"loss":2.3,)"
      R"("learning_rate":0.05,"batch_examples":128,"step_seconds":0.049,"input_seconds":0.014,)"
      R"("examples_per_second":2607.6,"loss_scale":1,"skipped":false,"flops":410779648,)"
      R"("flops_per_second":8.3e9,"peak_fraction":0.27,"allreduce_bytes":0,"allreduce_seconds":0,)"
      R"("rss_bytes":313700352,"replicas":[{"replica":0,"forward":0.0105,"backward":0.0226,)"
      R"("communication":1.9e-07,"optimizer":0.0015,"idle":2.2e-05,"busy_fraction":0.708}],)"
      R"("memory":[{"device":"cpu:0","bytes_in_use":{"parameters":2678824,"gradients":2678824,)"
      R"("optimizer_state":2678848,"activations":0,"workspace":0,"communication":0,"input":0},)"
      R"("peak_bytes":{"parameters":2678824,"gradients":2678824,"optimizer_state":2678848,)"
      R"("activations":1179660,"workspace":164736,"communication":0,"input":0},)"
      R"("peak_total_bytes":9025628,"capacity_bytes":25275990016}]})";
  std::string metrics = R"({"type":"run","model":"mlp","replicas":1,"batch_size":128})"
                        "\n";
  for (const char* n : {"1", "2"}) {
    std::string line = step;
    for (size_t at; (at = line.find("STEP")) != std::string::npos;) line.replace(at, 4, n);
    metrics += line + "\n";
  }
  metrics += R"({"type":"epoch","epoch":1,"train_loss":2.3,"validation_loss":2.2})"
             "\n";
  write_bytes(root / "metrics" / "0", metrics);
  return 0;
}
