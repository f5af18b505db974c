// tandem.data's C++ half: data::Dataset with named features. tandem/data.py
// wraps it to give tf.data's structure (tuples or dicts of features) and
// numpy output. Every stage runs in C++; a Python map function or generator
// takes the GIL for each call.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "tandem/data/csv.h"
#include "tandem/data/dataset.h"
#include "tandem/data/example.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/image.h"
#include "tandem/data/input_spec.h"

namespace tandem::python {
namespace {

using data::Dataset;
using data::Element;

py::dict element_to_dict(const Element& e) {
  py::dict out;
  for (const auto& [name, t] : e.features()) out[py::str(name)] = Variable(t);
  return out;
}

Element element_from_dict(const py::handle& value, const char* what) {
  if (!py::isinstance<py::dict>(value)) {
    throw py::type_error(std::string(what) + " must return a dict of features, got " +
                         py::str(py::type::of(value)).cast<std::string>());
  }
  Element e;
  for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(value)) {
    e.set(k.cast<std::string>(), as_variable(v).value());
  }
  return e;
}

// A Python callable as a map function: it takes and returns a dict of
// tensors, holding the GIL (so Python maps do not run in parallel).
data::MapFn python_map(py::function fn) {
  auto held = keep_python(std::move(fn));
  return [held](Element e) {
    py::gil_scoped_acquire gil;
    return element_from_dict((*held)(element_to_dict(e)), "a map function");
  };
}

// The keywords each built-in transform takes, the required ones first
// (`required` of them); "key" (the feature, default "image") is every one's.
struct TransformKeywords {
  std::vector<std::string> names;
  size_t required = 0;
};

const TransformKeywords& transform_keywords(const std::string& name) {
  static const std::map<std::string, TransformKeywords> table = {
      {"decode_image", {{"channels"}, 0}},
      {"resize", {{"height", "width"}, 2}},
      {"center_crop", {{"height", "width"}, 2}},
      {"normalize", {{"mean", "stddev"}, 2}},
      {"random_flip", {{"seed"}, 0}},
      {"random_crop", {{"padding", "seed"}, 1}},
      {"cast", {{"dtype"}, 1}}};
  const auto it = table.find(name);
  if (it == table.end()) {
    throw py::value_error("unknown transform '" + name +
                          "' (decode_image, resize, center_crop, normalize, random_flip, "
                          "random_crop, cast)");
  }
  return it->second;
}

// Refuses a keyword the transform does not take (a misspelt one was
// ignored: random_crop(pading=2) cropped nothing) or a required one missing.
void check_transform_keywords(const std::string& name, const py::dict& args) {
  const TransformKeywords& known = transform_keywords(name);
  std::string accepted;
  for (const std::string& k : known.names) accepted += k + ", ";
  accepted += "key";
  for (const auto& [k, v] : args) {
    const std::string given = py::str(k);
    if (given != "key" &&
        std::find(known.names.begin(), known.names.end(), given) == known.names.end())
      throw py::value_error("transform '" + name + "' takes no '" + given + "' (it takes " +
                            accepted + ")");
  }
  for (size_t r = 0; r < known.required; ++r) {
    if (!args.contains(known.names[r]))
      throw py::value_error("transform '" + name + "' needs '" + known.names[r] + "'");
  }
}

data::MapFn builtin_transform(const std::string& name, const py::dict& args) {
  check_transform_keywords(name, args);
  auto get = [&](const char* key, auto fallback) {
    if (!args.contains(key)) return fallback;
    try {
      return args[key].cast<decltype(fallback)>();
    } catch (const py::cast_error&) {
      throw py::type_error("transform '" + name + "': '" + key + "' has the wrong type (" +
                           py::str(py::type::of(args[key])).cast<std::string>() + ")");
    }
  };
  const std::string key = get("key", std::string("image"));
  if (name == "decode_image") return data::decode_image_fn(key, get("channels", 0));
  if (name == "resize")
    return data::resize_image_fn(get("height", int64_t{0}), get("width", int64_t{0}), key);
  if (name == "center_crop")
    return data::center_crop_fn(get("height", int64_t{0}), get("width", int64_t{0}), key);
  if (name == "normalize") {
    return data::normalize(get("mean", std::vector<float>{}), get("stddev", std::vector<float>{}),
                           key);
  }
  if (name == "random_flip") return data::random_flip_horizontal(get("seed", uint64_t{0}), key);
  if (name == "random_crop") {
    return data::random_crop_with_padding(get("padding", int64_t{0}), get("seed", uint64_t{0}),
                                          key);
  }
  return data::cast_to(dtype_from(args["dtype"]), key);  // "cast", the last one known
}

// The passes Python holds, so that the package's atexit hook can end them
// while their threads may still take the GIL: once the interpreter
// finalizes, a thread that takes it is ended by pthread_exit inside a
// Python map or generator call, which the pipeline's threads did not
// survive (an abort at exit with an iterator still open).
std::mutex live_passes_mutex;
std::vector<std::weak_ptr<data::Iterator>> live_passes;

// One pass over a dataset for Python's iteration protocol.
class PassIterator {
 public:
  explicit PassIterator(data::Iterator it) : it_(std::make_shared<data::Iterator>(std::move(it))) {
    std::lock_guard<std::mutex> lock(live_passes_mutex);
    std::erase_if(live_passes, [](const auto& p) { return p.expired(); });
    live_passes.push_back(it_);
  }
  PassIterator(PassIterator&&) = default;
  PassIterator& operator=(PassIterator&&) = default;
  // Ending the pass joins its threads (a prefetch's producer), which may be
  // waiting for the GIL to call a Python map or generator: let go of it
  // meanwhile (breaking out of a for loop over such a pipeline hung).
  ~PassIterator() {
    if (!it_ || PyGILState_Check() == 0) return;  // moved from, or no GIL to give
    if (_Py_IsFinalizing()) {
      // A pass opened after the atexit hook ended the others: a thread that
      // took the GIL now would be ended mid-call, so it is left running.
      new std::shared_ptr<data::Iterator>(std::move(it_));  // NOLINT: left to the exit
      return;
    }
    py::gil_scoped_release release;
    *it_ = data::Iterator();
  }
  py::dict next() {
    std::optional<Element> e;
    {
      py::gil_scoped_release release;
      e = it_->next();
    }
    if (!e) throw py::stop_iteration();
    return element_to_dict(*e);
  }

 private:
  std::shared_ptr<data::Iterator> it_;
};

// Ends every pass still open (the package's atexit hook): a later next()
// on one says the pass is over.
void end_open_passes() {
  std::vector<std::shared_ptr<data::Iterator>> open;
  {
    std::lock_guard<std::mutex> lock(live_passes_mutex);
    for (const auto& p : live_passes)
      if (auto it = p.lock()) open.push_back(std::move(it));
    live_passes.clear();
  }
  py::gil_scoped_release release;
  for (const auto& it : open) *it = data::Iterator();
}

std::vector<data::FeatureSpec> feature_specs(const py::dict& features) {
  std::vector<data::FeatureSpec> out;
  for (const auto& [name, spec] : features) {
    data::FeatureSpec f;
    f.name = name.cast<std::string>();
    py::tuple t = spec.cast<py::tuple>();
    if (t.size() != 2) {
      throw py::value_error("feature '" + f.name +
                            "': give (shape, dtype), shape None for "
                            "variable length");
    }
    if (t[0].is_none()) {
      f.variable_length = true;
    } else {
      f.shape = shape_from(t[0]);
    }
    f.dtype = dtype_from(t[1]);
    out.push_back(std::move(f));
  }
  return out;
}

// A column of from_tensor_slices: a C-contiguous, writable numpy array of a
// tandem dtype in this machine's byte order is shared, anything else copied (float64 into float32;
// int64, the labels numpy makes by default, into int32, the kernels' label type).
Tensor column_tensor(const py::object& value) {
  if (py::isinstance<py::array>(value)) {
    const auto array = py::cast<py::array>(value);
    if (!unshareable(array) && dtype_of_numpy(array.dtype()) != DType::i64)
      return tensor_sharing(array);
  }
  const Tensor t = as_variable(value).value();
  // Datasets carry int64 as int32 (labels' and indices' dtype), a tandem
  // int64 tensor as numpy's int64 (it stayed int64: fit then failed).
  if (t.dtype() == DType::i64) return indices_from(value, "a dataset column");
  return t;
}

// One pass of a Python generator: `make_pass(pass)` returns an iterator of
// dicts of arrays (tandem/data.py checks them against the signature); each
// element is taken holding the GIL.
Dataset python_generator(py::function make_pass, int64_t cardinality) {
  struct Pass : data::IteratorBase {
    std::shared_ptr<py::object> iterator;
    std::optional<Element> next() override {
      py::gil_scoped_acquire gil;
      PyObject* item = PyIter_Next(iterator->ptr());
      if (item == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return std::nullopt;
      }
      return element_from_dict(py::reinterpret_steal<py::object>(item), "a generator");
    }
  };
  auto held = keep_python(std::move(make_pass));
  return Dataset::from_generator(
      [held](int64_t pass) -> std::unique_ptr<data::IteratorBase> {
        py::gil_scoped_acquire gil;
        auto p = std::make_unique<Pass>();
        p->iterator = keep_python(py::iter((*held)(pass)));
        return p;
      },
      "generator", cardinality);
}

void bind_sources(py::module_& d) {
  d.def("from_generator", &python_generator, py::arg("make_pass"),
        py::arg("cardinality") = data::kUnknownCardinality);
  d.def("from_tensors", [](const std::vector<std::pair<std::string, py::object>>& columns) {
    std::vector<std::pair<std::string, Tensor>> cs;
    for (const auto& [name, value] : columns) cs.emplace_back(name, column_tensor(value));
    return Dataset::from_tensors(std::move(cs));
  });
  d.def("range", &Dataset::range, py::arg("count"));
  d.def(
      "from_tfrecord",
      [](const std::vector<std::string>& files, const py::object& features,
         const std::string& compression) {
        data::Compression c =
            compression == "gzip"   ? data::Compression::gzip
            : compression == "zlib" ? data::Compression::zlib
            : compression.empty()
                ? data::Compression::none
                : throw py::value_error("compression must be '', 'gzip' or 'zlib'");
        Dataset ds = Dataset::from_tfrecord(files, c);
        if (features.is_none()) return ds;
        return ds.map(data::example_parser(feature_specs(features.cast<py::dict>())));
      },
      py::arg("files"), py::arg("features") = py::none(), py::arg("compression") = "");
  d.def(
      "from_csv",
      [](const std::string& path, bool header, const std::string& delimiter) {
        if (delimiter.size() != 1) throw py::value_error("delimiter must be one character");
        return data::from_csv(path, {.header = header, .delimiter = delimiter[0]});
      },
      py::arg("path"), py::arg("header") = true, py::arg("delimiter") = ",");
  d.def(
      "from_image_folder",
      [](const std::string& root, const py::object& seed) {
        data::ImageFolderOptions o;
        if (!seed.is_none()) o.shuffle_seed = seed.cast<uint64_t>();
        return Dataset::from_image_folder(root, o);
      },
      py::arg("root"), py::arg("shuffle_seed") = py::none());
  d.def(
      "from_spec",
      [](const std::string& path, uint64_t seed) {
        const data::InputSpec spec = data::read_input_spec(path);
        return py::make_tuple(data::make_input(spec, seed), spec.input, spec.label);
      },
      py::arg("path"), py::arg("seed") = 0);
  d.def(
      "fashion_mnist",
      [](const std::string& dir) {
        const data::FashionMnist f =
            data::load_fashion_mnist(dir.empty() ? data::default_fashion_mnist_dir() : dir);
        auto pair = [](const data::LabeledImages& s) {
          return py::make_tuple(to_numpy(s.images), to_numpy(s.labels));
        };
        return py::make_tuple(pair(f.train), pair(f.test));
      },
      py::arg("dir") = "");
}

void bind_dataset(py::module_& d) {
  py::class_<Dataset>(d, "Dataset")
      .def(
          "map",
          [](const Dataset& ds, py::function fn, int parallel, bool deterministic) {
            return ds.map(python_map(std::move(fn)), {parallel, deterministic});
          },
          py::arg("fn"), py::arg("num_parallel_calls") = 1, py::arg("deterministic") = true)
      .def("map_builtin",
           [](const Dataset& ds, const std::string& name, const py::dict& args, int parallel,
              bool deterministic) {
             return ds.map(builtin_transform(name, args), {parallel, deterministic});
           })
      .def("filter",
           [](const Dataset& ds, py::function fn) {
             auto held = keep_python(std::move(fn));
             return ds.filter([held](const Element& e) {
               py::gil_scoped_acquire gil;
               return (*held)(element_to_dict(e)).cast<bool>();
             });
           })
      .def("batch", &Dataset::batch, py::arg("batch_size"), py::arg("drop_remainder") = false)
      .def("shuffle", &Dataset::shuffle, py::arg("buffer_size"), py::arg("seed") = 0,
           py::arg("reshuffle_each_iteration") = true)
      .def("repeat", &Dataset::repeat, py::arg("count") = -1)
      .def("take", &Dataset::take, py::arg("count"))
      .def("skip", &Dataset::skip, py::arg("count"))
      .def("shard", &Dataset::shard, py::arg("num_shards"), py::arg("index"))
      .def("cache", &Dataset::cache, py::arg("path") = "")
      .def("prefetch", &Dataset::prefetch, py::arg("buffer_size") = data::kAutotune)
      .def("cardinality", &Dataset::cardinality)
      .def(
          "iterate",
          [](const Dataset& ds, int64_t pass) { return PassIterator(ds.iterator(pass)); },
          py::arg("pass_index") = 0);
  py::class_<PassIterator>(d, "_Pass")
      .def("__iter__", [](PassIterator& it) -> PassIterator& { return it; })
      .def("__next__", &PassIterator::next);
  d.def("_end_open_passes", &end_open_passes,
        "Ends every pass still open (tandem's atexit hook, before the interpreter finalizes).");
  d.attr("AUTOTUNE") = data::kAutotune;
}

}  // namespace

void bind_data(py::module_& m) {
  py::module_ d = m.def_submodule("data", "tf.data-style input pipelines.");
  bind_sources(d);
  bind_dataset(d);
}

}  // namespace tandem::python
