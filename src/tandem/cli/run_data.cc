#include "tandem/cli/run_data.h"

#include <fmt/format.h>

#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/cli/run_setup.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/image_folder.h"

namespace tandem::cli {

void use_model_classes(data::InputSpec& spec, const std::vector<std::string>& classes,
                       const std::string& what) {
  if (spec.format != "image_folder" || classes.empty()) return;
  spec.known_classes = classes;
  const data::ImageFolderIndex index =
      data::index_image_folder(spec.root, {.known_classes = classes});
  if (!index.missing_classes.empty()) {
    std::string names;
    for (const std::string& c : index.missing_classes) names += (names.empty() ? "" : ", ") + c;
    fmt::print(stderr,
               "tandem: warning: {} has no folder for {} of the model's {} classes ({}); its "
               "figures cover the other {}\n",
               what, index.missing_classes.size(), classes.size(), names,
               classes.size() - index.missing_classes.size());
  }
}

namespace {

data::LabeledImages first(const data::LabeledImages& d, int64_t count) {
  if (count <= 0 || count >= d.size()) return d;
  return {d.images.slice(0, count), d.labels.slice(0, count)};
}

}  // namespace

RunData load_run_data(const RunOptions& o, uint64_t seed) {
  RunData r;
  if (o.data.empty()) {
    if (!o.validation_data.empty())
      TANDEM_THROW(InvalidArgument, "--validation-data needs --data (the training data)");
    const data::FashionMnist fashion = data::load_fashion_mnist(o.data_dir);
    // --train-examples and --test-examples take views: the whole set stays loaded.
    for (const data::LabeledImages* d : {&fashion.train, &fashion.test})
      r.resident_bytes += static_cast<int64_t>(d->images.nbytes() + d->labels.nbytes());
    const data::LabeledImages train = first(fashion.train, o.train_examples);
    const data::LabeledImages test = first(fashion.test, o.test_examples);
    // Reshuffled every epoch (pass) from the seed.
    r.train = data::as_dataset(train).shuffle(train.size(), seed);
    r.validation = data::as_dataset(test);
    r.description =
        fmt::format("Fashion-MNIST, {} train / {} test examples", train.size(), test.size());
    // Absolute, as the run's other paths: evaluate and resume may run elsewhere.
    r.summary = {{"data_dir", std::filesystem::absolute(o.data_dir).string()},
                 {"train_examples", std::to_string(train.size())},
                 {"test_examples", std::to_string(test.size())}};
    return r;
  }
  if (o.train_examples != 0 || o.test_examples != 0) {
    TANDEM_THROW(InvalidArgument,
                 "--train-examples and --test-examples select Fashion-MNIST examples; with "
                 "--data, limit the data in its specification or with --steps-per-epoch");
  }
  if (o.data_dir != data::default_fashion_mnist_dir()) {
    TANDEM_THROW(InvalidArgument, "--data-dir names Fashion-MNIST's folder; with --data, '", o.data,
                 "' says which data to read");
  }
  const data::InputSpec spec = data::read_input_spec(o.data);
  if (spec.format == "image_folder") r.class_names = data::image_folder_class_names(spec.root);
  r.train = data::make_input(spec, seed);
  r.input = spec.input;
  r.label = spec.label;
  if (spec.needs_padding()) r.padding = spec.padding();
  const int64_t examples = r.train.cardinality();
  r.description = fmt::format("{} ({}{})", o.data, spec.format,
                              examples >= 0 ? fmt::format(", {} examples", examples) : "");
  r.summary = {{"data", std::filesystem::absolute(o.data).string()}};
  if (!o.validation_data.empty()) {
    data::InputSpec v = data::read_input_spec(o.validation_data);
    if (v.input != spec.input || v.label != spec.label) {
      TANDEM_THROW(InvalidArgument, "--validation-data '", o.validation_data, "' names input '",
                   v.input, "' and label '", v.label, "' but --data names '", spec.input, "' and '",
                   spec.label, "'");
    }
    v.shuffle = 0;
    use_model_classes(v, r.class_names, "--validation-data '" + o.validation_data + "'");
    r.validation = data::make_input(v, seed);
    const int64_t n = r.validation->cardinality();
    r.description += fmt::format(", validation {}{}", o.validation_data,
                                 n >= 0 ? fmt::format(" ({} examples)", n) : "");
    r.summary["validation_data"] = std::filesystem::absolute(o.validation_data).string();
  }
  return r;
}

}  // namespace tandem::cli
