// `tandem bench pipeline`: input-pipeline throughput.
//  (a) images: JPEG decode + random crop with padding + flip + normalise,
//      batched, with 1, 2, ... parallel calls and autotune; ratio to sequential
//      and autotune's fraction of the best hand-tuned setting.
//  (b) fashion: Fashion-MNIST from IDX with normalise, shuffle, batch(128),
//      prefetch: batches per second against what the cnn training step
//      consumes (measured in the same run), and the per-stage counters.
// Variants are interleaved within each repeat; medians with min and max.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/commands.h"
#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/image.h"
#include "tandem/train/throughput.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PipelineOptions {
  std::string which = "images,fashion";
  int repeats = 3;
  int images = 1024;
  int image_size = 96;
  std::string data_dir = data::default_fashion_mnist_dir();
  bool json = false;
};

struct Sample {
  std::vector<double> values;
  double median() const { return tandem::median(values); }
  double min() const { return *std::min_element(values.begin(), values.end()); }
  double max() const { return *std::max_element(values.begin(), values.end()); }
};

// Elements per second of one full pass.
double time_pass(const data::Dataset& d, int64_t elements_per_item) {
  data::Iterator it = d.iterator();
  const auto start = Clock::now();
  int64_t elements = 0;
  while (auto e = it.next())
    elements += elements_per_item > 0 ? elements_per_item : e->features()[0].second.dim(0);
  return static_cast<double>(elements) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

nlohmann::json stats_json(const data::Dataset& d) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : d.stats()) {
    rows.push_back({{"stage", s.stage},
                    {"elements", s.elements},
                    {"busy_seconds", s.busy_seconds},
                    {"wait_seconds", s.wait_seconds},
                    {"mean_buffer", s.mean_buffer},
                    {"buffer_capacity", s.buffer_capacity}});
  }
  return rows;
}

void print_stats(const data::Dataset& d) {
  fmt::print("  {:<40} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "stage", "elements", "busy s", "wait s",
             "buffer", "capacity");
  for (const auto& s : d.stats()) {
    fmt::print("  {:<40} {:>9} {:>9.3f} {:>9.3f} {:>8.2f} {:>8}\n", s.stage, s.elements,
               s.busy_seconds, s.wait_seconds, s.mean_buffer, s.buffer_capacity);
  }
}

nlohmann::json bench_images(const PipelineOptions& o) {
  // Synthetic photographs: smooth gradients with noise, JPEG-encoded once.
  std::vector<data::Element> encoded;
  Generator g(1);
  for (int i = 0; i < o.images; ++i) {
    Tensor image = Tensor::empty(Shape{o.image_size, o.image_size, 3}, DType::u8);
    auto* p = image.data<uint8_t>();
    for (int64_t k = 0; k < image.numel(); ++k) {
      p[k] = static_cast<uint8_t>(
          (k / 3 % o.image_size + k / 3 / o.image_size + 40 * (k % 3)) % 256 ^ (g.next_below(16)));
    }
    Tensor label = Tensor::empty(Shape{}, DType::i32);
    label.data<int32_t>()[0] = i % 10;
    encoded.push_back(data::Element{{"image", data::encode_jpeg(image, 90)}, {"label", label}});
  }
  const data::MapFn decode = data::decode_image_fn();
  const data::MapFn crop = data::random_crop_with_padding(4, 1);
  const data::MapFn flip = data::random_flip_horizontal(2);
  const data::MapFn norm = data::normalize({0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f});
  const data::MapFn augment = [=](data::Element e) {
    return norm(flip(crop(decode(std::move(e)))));
  };
  auto pipeline = [&](int parallel) {
    return data::Dataset::from_elements(encoded)
        .map(augment, {.num_parallel_calls = parallel})
        .batch(32)
        .prefetch(data::kAutotune);
  };
  std::vector<int> settings = {1};
  for (int p = 2; p <= std::max(2, cpu_info().logical_cpus); p *= 2) settings.push_back(p);
  settings.push_back(data::kAutotune);
  std::vector<Sample> samples(settings.size());
  std::vector<data::Dataset> last;
  for (int r = 0; r < o.repeats; ++r) {
    last.clear();
    for (size_t v = 0; v < settings.size(); ++v) {
      last.push_back(pipeline(settings[v]));
      samples[v].values.push_back(time_pass(last.back(), 0));
    }
  }
  double best_manual = 0;
  for (size_t v = 0; v + 1 < settings.size(); ++v)
    best_manual = std::max(best_manual, samples[v].median());
  const double sequential = samples[0].median();
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    fmt::print(
        "images: {} JPEGs of {}x{}x3, decode + crop(pad 4) + flip + normalise, batch 32, {} "
        "repeats\n",
        o.images, o.image_size, o.image_size, o.repeats);
    fmt::print("  {:>15} {:>14} {:>10} {:>10} {:>13}\n", "parallel calls", "elements/s", "min",
               "max", "x sequential");
  }
  for (size_t v = 0; v < settings.size(); ++v) {
    const std::string name =
        settings[v] == data::kAutotune ? "autotune" : std::to_string(settings[v]);
    rows.push_back({{"parallel_calls", name},
                    {"elements_per_second_median", samples[v].median()},
                    {"min", samples[v].min()},
                    {"max", samples[v].max()},
                    {"speedup_over_sequential", samples[v].median() / sequential}});
    if (!o.json) {
      fmt::print("  {:>15} {:>14.0f} {:>10.0f} {:>10.0f} {:>12.2f}x\n", name, samples[v].median(),
                 samples[v].min(), samples[v].max(), samples[v].median() / sequential);
    }
  }
  const double autotune_fraction = samples.back().median() / best_manual;
  if (!o.json) {
    fmt::print("  autotune reaches {:.0f}% of the best hand-tuned setting\n",
               100 * autotune_fraction);
    fmt::print("  stages of the last autotune pass:\n");
    print_stats(last.back());
  }
  return {{"results", rows},
          {"autotune_fraction_of_best", autotune_fraction},
          {"stages", stats_json(last.back())}};
}

nlohmann::json bench_fashion(const PipelineOptions& o) {
  const std::string dir = o.data_dir;
  // Normalising whole batches (map after batch) keeps the per-element cost
  // of the pipeline's hand-offs out of the hot path, as tf.data's guide
  // recommends for cheap functions.
  const auto to_f32 = [](data::Element e) {
    const Tensor& u8 = e.at("image");
    const int64_t n = u8.dim(0);
    e.set("image", data::normalize_images(u8, data::kFashionMnistMean, data::kFashionMnistStd)
                       .reshape(Shape{n, 28, 28, 1}));
    return e;
  };
  auto pipeline = [&](int parallel) {
    return data::Dataset::from_idx(dir + "/train-images-idx3-ubyte.gz",
                                   dir + "/train-labels-idx1-ubyte.gz")
        .shuffle(10000, 1)
        .batch(128)
        .map(to_f32, {.num_parallel_calls = parallel})
        .prefetch(data::kAutotune);
  };
  Sample input, consumption;
  data::Dataset last = pipeline(data::kAutotune);
  const int saved = num_threads();
  for (int r = 0; r < o.repeats; ++r) {
    last = pipeline(data::kAutotune);
    input.values.push_back(time_pass(last, 1) * 1.0);  // batches per second
    // What two devices' cnn steps consume: the model on both cores, batch 128.
    set_num_threads(std::max(1, cpu_info().physical_cores));
    const auto t = train::measure_training_throughput(
        {.model = "cnn", .batch_size = 128, .warmup_steps = 3, .steps = 15});
    set_num_threads(saved);
    consumption.values.push_back(t.examples_per_second / 128.0);
  }
  const double ratio = input.median() / consumption.median();
  if (!o.json) {
    fmt::print(
        "fashion: Fashion-MNIST train from IDX, shuffle(10000) + batch(128) + normalise (autotune) "
        "+ prefetch\n");
    fmt::print("  pipeline   {:>9.1f} batches/s (min {:.1f}, max {:.1f})\n", input.median(),
               input.min(), input.max());
    fmt::print("  cnn steps  {:>9.1f} batches/s consumed (batch 128 on {} core(s))\n",
               consumption.median(), std::max(1, cpu_info().physical_cores));
    fmt::print(
        "  the pipeline is {:.1f}x faster than training consumes it (target: at least 10x)\n",
        ratio);
    print_stats(last);
  }
  return {{"pipeline_batches_per_second_median", input.median()},
          {"pipeline_min", input.min()},
          {"pipeline_max", input.max()},
          {"cnn_batches_per_second_median", consumption.median()},
          {"ratio", ratio},
          {"stages", stats_json(last)}};
}

int run_bench_pipeline(const PipelineOptions& o) {
  if (o.repeats < 1 || o.images < 1 || o.image_size < 8) {
    TANDEM_THROW(InvalidArgument,
                 "--repeats and --images must be positive and --image-size at least 8");
  }
  nlohmann::json out = {{"bench", "pipeline"}, {"repeats", o.repeats}};
  for (const std::string& which : split_list(o.which)) {
    if (which == "images") {
      out["images"] = bench_images(o);
    } else if (which == "fashion") {
      out["fashion"] = bench_fashion(o);
    } else {
      TANDEM_THROW(InvalidArgument, "--which: unknown benchmark '", which,
                   "' (expected images or fashion)");
    }
  }
  if (o.json) fmt::print("{}\n", out.dump(2));
  return 0;
}

}  // namespace

Command add_bench_pipeline_command(CLI::App& bench) {
  CLI::App* c =
      bench.add_subcommand("pipeline", "Input-pipeline throughput and per-stage counters");
  auto o = std::make_shared<PipelineOptions>();
  c->add_option("--which", o->which, "Comma-separated: images, fashion")->capture_default_str();
  c->add_option("--repeats", o->repeats, "Samples per variant")->capture_default_str();
  c->add_option("--images", o->images, "Synthetic JPEGs in the image benchmark")
      ->capture_default_str();
  c->add_option("--image-size", o->image_size, "Their height and width")->capture_default_str();
  c->add_option("--data-dir", o->data_dir, "Fashion-MNIST directory")->capture_default_str();
  c->add_flag("--json", o->json, "Print the results as JSON");
  return {c, [o] { return run_bench_pipeline(*o); }};
}

}  // namespace tandem::cli
