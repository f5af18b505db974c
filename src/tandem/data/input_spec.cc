// Input specifications: TOML parsing (the only file here that includes
// toml++) and the pipeline each format's spec builds.
#include "tandem/data/input_spec.h"

#include <glob.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

#include "tandem/base/detail/toml_document.h"
#include "tandem/base/error.h"
#include "tandem/base/text_file.h"
#include "tandem/data/csv.h"
#include "tandem/data/example.h"
#include "tandem/data/feature_ops.h"
#include "tandem/data/image.h"
#include "tandem/data/image_folder.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

// Specs are small: a bigger file is not one.
constexpr std::uintmax_t kMaxSpecBytes = 1 << 20;

// Reads typed values out of one TOML table, naming the file, line and key
// in every error, and refusing keys nobody read (typos).
class Reader {
 public:
  Reader(const toml::table& table, std::string path, std::string where)
      : table_(table), path_(std::move(path)), where_(std::move(where)) {}

  [[noreturn]] void fail(const toml::node* node, const std::string& message) const {
    const int line = node ? static_cast<int>(node->source().begin.line)
                          : static_cast<int>(table_.source().begin.line);
    TANDEM_THROW(InvalidArgument, path_, ":", line, ": ", where_.empty() ? "" : where_ + ": ",
                 message);
  }

  const toml::node* get(const std::string& key) {
    used_.insert(key);
    return table_.get(key);
  }

  std::optional<std::string> string(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) fail(n, "'" + key + "' must be a string");
    return n->value<std::string>();
  }
  std::optional<int64_t> integer(const std::string& key, int64_t minimum) {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) fail(n, "'" + key + "' must be a whole number");
    const int64_t v = *n->value<int64_t>();
    if (v < minimum) fail(n, "'" + key + "' must be at least " + std::to_string(minimum));
    return v;
  }
  std::optional<double> number(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_number()) fail(n, "'" + key + "' must be a number");
    return n->value<double>();
  }
  std::optional<bool> boolean(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_boolean()) fail(n, "'" + key + "' must be true or false");
    return n->value<bool>();
  }
  std::vector<std::string> strings(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return {};
    if (n->is_string()) return {*n->value<std::string>()};
    if (!n->is_array()) fail(n, "'" + key + "' must be a string or a list of strings");
    std::vector<std::string> out;
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) fail(&e, "'" + key + "' must hold strings");
      out.push_back(*e.value<std::string>());
    }
    return out;
  }
  std::vector<int64_t> integers(const std::string& key, size_t count, int64_t minimum) {
    const toml::node* n = get(key);
    if (!n) return {};
    if (!n->is_array()) fail(n, "'" + key + "' must be a list of whole numbers");
    std::vector<int64_t> out;
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_integer() || *e.value<int64_t>() < minimum)
        fail(&e, "'" + key + "' must hold whole numbers >= " + std::to_string(minimum));
      out.push_back(*e.value<int64_t>());
    }
    if (count > 0 && out.size() != count)
      fail(n, "'" + key + "' needs " + std::to_string(count) + " values");
    return out;
  }
  std::vector<float> floats(const std::string& key) {
    const toml::node* n = get(key);
    if (!n) return {};
    if (n->is_number()) return {static_cast<float>(*n->value<double>())};
    if (!n->is_array()) fail(n, "'" + key + "' must be a number or a list of numbers");
    std::vector<float> out;
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_number()) fail(&e, "'" + key + "' must hold numbers");
      out.push_back(static_cast<float>(*e.value<double>()));
    }
    return out;
  }
  // Every key of the table was read: anything else is a typo.
  void finish() const {
    for (const auto& [key, node] : table_) {
      if (!used_.count(std::string(key.str())))
        fail(&node, "unknown key '" + std::string(key.str()) + "'");
    }
  }

 private:
  const toml::table& table_;
  std::string path_, where_;
  std::set<std::string> used_;
};

// `path` with glob's special characters escaped: the spec's own folder is
// not a pattern (a folder named "g[1]" read its sibling "g1").
std::string glob_escaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Paths and globs relative to the spec's folder, expanded and sorted. Each
// must name a regular file, once: a folder read as an empty file, and a
// file named twice (a path and a glob) gave its examples twice.
std::vector<std::string> expand(const std::vector<std::string>& patterns, const fs::path& base,
                                Reader& reader, const toml::node* node) {
  std::vector<std::string> out;
  const auto add = [&](const std::string& path) {
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      reader.fail(node, fs::is_directory(path, error) ? "'" + path + "' is a folder, not a file"
                                                      : "'" + path + "' is not a regular file");
    }
    if (std::find(out.begin(), out.end(), path) != out.end())
      reader.fail(node, "'" + path + "' is named twice (each file is read once)");
    out.push_back(path);
  };
  for (const std::string& pattern : patterns) {
    const bool absolute = fs::path(pattern).is_absolute();
    const fs::path p = absolute ? fs::path(pattern) : base / pattern;
    if (pattern.find_first_of("*?[") == std::string::npos) {
      // The error_code overload: a name the OS refuses (too long, a bad
      // component) is a missing file here, not an exception.
      std::error_code error;
      if (!fs::exists(p, error)) {
        reader.fail(node, "no file '" + p.string() + "'" +
                              (error ? " (" + error.message() + ")" : std::string()));
      }
      add(p.string());
      continue;
    }
    const std::string escaped =
        absolute ? pattern : (fs::path(glob_escaped(base.string())) / pattern).string();
    glob_t matches{};
    const int status = ::glob(escaped.c_str(), 0, nullptr, &matches);
    if (status != 0) {
      globfree(&matches);
      reader.fail(node, "no file matches '" + p.string() + "'");
    }
    std::vector<std::string> found(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    globfree(&matches);
    for (const std::string& path : found) add(path);
  }
  return out;
}

InputFeature parse_feature(const std::string& name, const toml::table& table,
                           const std::string& format, const std::string& path) {
  Reader r(table, path, "features." + name);
  InputFeature f;
  f.name = name;
  const std::optional<std::string> source = r.string("source");
  f.source = source.value_or(name);
  f.columns = r.strings("columns");
  f.type = r.string("type").value_or("");
  f.decode = r.string("decode").value_or("");
  f.channels = static_cast<int>(r.integer("channels", 0).value_or(0));
  f.shape = r.integers("shape", 0, 1);
  f.variable_length = r.boolean("variable_length").value_or(false);
  const std::optional<double> padding = r.number("padding");
  f.padding = padding.value_or(0.0);
  const std::optional<std::string> dtype = r.string("dtype");
  f.resize = r.integers("resize", 2, 1);
  f.crop = r.integers("crop", 2, 1);
  if (const std::optional<double> s = r.number("scale")) f.scale = static_cast<float>(*s);
  f.mean = r.floats("mean");
  f.stddev = r.floats("std");
  const toml::node* self = nullptr;
  if (f.channels != 0 && f.channels != 1 && f.channels != 3)
    r.fail(r.get("channels"), "'channels' must be 1 or 3 (0: as stored)");
  for (float s : f.stddev) {
    if (!(s > 0.0f)) r.fail(r.get("std"), "'std' values must be positive");
  }
  // Settings that would do nothing are refused, not ignored (a CSV feature's
  // 'source' read the column named after the feature instead).
  if (f.scale && !(*f.scale > 0.0f && std::isfinite(*f.scale)))
    r.fail(r.get("scale"), "'scale' must be positive (every pixel times it)");
  if (padding && !f.variable_length)
    r.fail(r.get("padding"), "'padding' applies to variable_length features");
  if (source && format != "tfrecord")
    r.fail(r.get("source"), "'source' applies to tfrecord features (CSV features name 'columns')");
  const bool image_ops = !f.resize.empty() || !f.crop.empty() || f.scale || !f.mean.empty() ||
                         !f.stddev.empty() || f.channels != 0;
  if (format == "tfrecord") {
    if (f.type != "bytes" && f.type != "int64" && f.type != "float")
      r.fail(r.get("type"), "'type' must be bytes, int64 or float (the Example's list kind)");
    if (f.type == "bytes" && f.decode != "image" && f.decode != "raw")
      r.fail(r.get("decode"), "bytes features need decode = \"image\" or \"raw\"");
    if (f.type != "bytes" && !f.decode.empty())
      r.fail(r.get("decode"), "'decode' applies to bytes features");
    if (!f.columns.empty()) r.fail(r.get("columns"), "'columns' applies to CSV files");
  } else if (format == "csv") {
    if (f.columns.empty()) f.columns = {name};
    if (!f.type.empty() && f.type != "float" && f.type != "int")
      r.fail(r.get("type"), "CSV features have type float or int");
    if (f.type == "int" && f.columns.size() != 1)
      r.fail(r.get("type"), "an int CSV feature reads one column");
    if (!f.decode.empty() || image_ops || f.variable_length || !f.shape.empty() || dtype)
      r.fail(self, "CSV features take only 'columns' and 'type'");
  } else {
    if (name != "image")
      r.fail(self, format + " data has the features image and label; only image takes settings");
    if (!f.type.empty() || !f.columns.empty() || f.variable_length || !f.shape.empty() ||
        !f.decode.empty() || dtype)
      r.fail(self, "the image of " + format + " data takes decode settings only");
    if (format == "idx" && f.channels != 0)
      r.fail(r.get("channels"), "idx images are gray: 'channels' applies to decoded images");
    f.decode = format == "image_folder" ? "image" : "";
  }
  if (image_ops && f.decode != "image" && format != "idx")
    r.fail(self, "resize, crop, channels, scale, mean and std apply to decoded images");
  if (!f.shape.empty() && f.variable_length)
    r.fail(r.get("shape"), "a feature has a fixed shape or a variable length, not both");
  if (f.decode == "image" && f.variable_length)
    r.fail(r.get("variable_length"), "images are resized, not padded");
  if (f.decode == "raw" && !f.shape.empty())
    r.fail(r.get("shape"), "raw bytes are a vector of their length");
  if (dtype) {
    f.dtype = parse_dtype(*dtype);
    if (f.dtype != DType::f32 && f.dtype != DType::i32 && f.dtype != DType::u8)
      r.fail(r.get("dtype"), "'dtype' must be f32, i32 or u8");
    if (f.type != "int64" && f.decode != "raw")
      r.fail(r.get("dtype"), "'dtype' applies to int64 features and raw bytes");
    // The Example's integers are not bytes: a u8 int64 feature was read as
    // a bytes list and every record failed.
    if (f.type == "int64" && f.dtype == DType::u8)
      r.fail(r.get("dtype"), "an int64 feature's 'dtype' must be i32 or f32");
  } else {
    f.dtype = f.type == "int64" || f.type == "int" ? DType::i32
              : f.decode == "raw"                  ? DType::u8
                                                   : DType::f32;
  }
  r.finish();
  return f;
}

}  // namespace

bool InputSpec::needs_padding() const {
  for (const InputFeature& f : features) {
    if (f.variable_length) return true;
  }
  return false;
}

PaddedBatchOptions InputSpec::padding() const {
  PaddedBatchOptions o;
  for (const InputFeature& f : features) {
    if (f.variable_length) o.padding_values[f.name] = f.padding;
  }
  return o;
}

InputSpec parse_input_spec(std::string_view text, const std::string& path) {
  toml::table root;
  try {
    root = tandem::detail::parse_toml(text, path);
  } catch (const toml::parse_error& e) {
    TANDEM_THROW(InvalidArgument, path, ":", e.source().begin.line, ": ", e.description());
  }
  Reader r(root, path, "");
  InputSpec spec;
  spec.path = path;
  const fs::path base = fs::path(path).parent_path();
  const std::optional<std::string> format = r.string("format");
  if (!format || (*format != "tfrecord" && *format != "csv" && *format != "idx" &&
                  *format != "image_folder")) {
    r.fail(r.get("format"), "'format' must be tfrecord, csv, idx or image_folder");
  }
  spec.format = *format;
  const std::vector<std::string> files = r.strings("files");
  if (spec.format == "tfrecord" || spec.format == "csv") {
    if (files.empty()) r.fail(nullptr, "'files' names the " + spec.format + " files");
    spec.files = expand(files, base, r, r.get("files"));
    if (spec.format == "csv" && spec.files.size() != 1)
      r.fail(r.get("files"), "CSV data is one file");
  } else if (!files.empty()) {
    r.fail(r.get("files"), "'files' applies to tfrecord and csv data");
  }
  if (spec.format != "tfrecord" && r.get("compression") != nullptr)
    r.fail(r.get("compression"), "'compression' applies to tfrecord data");
  const std::string compression = r.string("compression").value_or("auto");
  if (compression == "auto") {
    spec.detect_compression = true;
  } else if (compression == "none" || compression == "gzip" || compression == "zlib") {
    spec.detect_compression = false;
    spec.compression = compression == "none"   ? Compression::none
                       : compression == "gzip" ? Compression::gzip
                                               : Compression::zlib;
  } else {
    r.fail(r.get("compression"), "'compression' must be auto, none, gzip or zlib");
  }
  if (spec.format == "idx") {
    const std::optional<std::string> images = r.string("images"), labels = r.string("labels");
    if (!images || !labels) r.fail(nullptr, "idx data names its 'images' and 'labels' files");
    spec.images = expand({*images}, base, r, r.get("images"))[0];
    spec.labels = expand({*labels}, base, r, r.get("labels"))[0];
  }
  if (spec.format == "image_folder") {
    const std::optional<std::string> folder = r.string("root");
    if (!folder) r.fail(nullptr, "image_folder data names its 'root' folder");
    spec.root = (fs::path(*folder).is_absolute() ? fs::path(*folder) : base / *folder).string();
    std::error_code error;
    if (!fs::is_directory(spec.root, error)) {
      r.fail(r.get("root"), "no folder '" + spec.root + "'" +
                                (error ? " (" + error.message() + ")" : std::string()));
    }
  }
  // An image folder lists its files class by class: unshuffled, a model
  // would train on one class after another. So it shuffles its file list
  // unless told `shuffle = 0` (as a folder given directly does).
  spec.shuffle = r.integer("shuffle", 0).value_or(spec.format == "image_folder" ? 1 : 0);
  spec.cache = r.boolean("cache").value_or(false);
  if (const toml::node* p = r.get("parallel")) {
    if (p->is_string() && *p->value<std::string>() == "auto") {
      spec.parallel = kAutotune;
    } else if (p->is_integer() && *p->value<int64_t>() >= 1 && *p->value<int64_t>() <= 1024) {
      spec.parallel = static_cast<int>(*p->value<int64_t>());
    } else {
      r.fail(p, "'parallel' must be \"auto\" or a whole number from 1 to 1024");
    }
  }
  spec.input = r.string("input").value_or("image");
  spec.label = r.string("label").value_or("label");
  if (const toml::node* features = r.get("features")) {
    if (!features->is_table()) r.fail(features, "'features' must be a table of tables");
    for (const auto& [name, node] : *features->as_table()) {
      if (!node.is_table())
        r.fail(&node, "features." + std::string(name.str()) + " must be a table");
      spec.features.push_back(
          parse_feature(std::string(name.str()), *node.as_table(), spec.format, path));
    }
  }
  if (spec.format == "tfrecord" || spec.format == "csv") {
    std::set<std::string> names;
    for (const InputFeature& f : spec.features) names.insert(f.name);
    for (const std::string& needed : {spec.input, spec.label}) {
      if (!names.count(needed))
        r.fail(nullptr, "the " + std::string(needed == spec.input ? "input" : "label") +
                            " feature '" + needed + "' is not among the [features.*] tables");
    }
  } else if (spec.input != "image" || spec.label != "label") {
    r.fail(nullptr, spec.format + " data has the features image and label");
  }
  r.finish();
  return spec;
}

namespace {

// A data file given where its specification belongs: an error that says
// which specification describes it, rather than its bytes as a TOML error.
void refuse_data_file(const std::string& path) {
  std::string extension = fs::path(path).extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string name = fs::path(path).filename().string();
  const auto is = [&](std::initializer_list<const char*> endings) {
    for (const char* e : endings)
      if (extension == e) return true;
    return false;
  };
  if (is({".csv", ".tsv"})) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is a CSV file, not a data specification: give a .toml file that describes it "
                 "(format = \"csv\", files = [\"",
                 name, "\"], input, label and [features.*] tables; docs/training.md)");
  }
  if (is({".tfrecord", ".tfrecords"})) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is a TFRecord file, not a data specification: give a .toml file that "
                 "describes it (format = \"tfrecord\", files = [\"",
                 name, "\"] and [features.*] tables; docs/training.md)");
  }
  if (is({".gz"})) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is a gzip file (IDX?), not a data specification: give a .toml file that "
                 "describes the pair (format = \"idx\", images = ..., labels = ...; "
                 "docs/training.md)");
  }
  if (is({".png", ".jpg", ".jpeg"})) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is an image, not a data specification: give the folder of class sub-folders "
                 "that holds the images");
  }
}

}  // namespace

InputSpec read_input_spec(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    InputSpec spec;
    spec.path = path;
    spec.format = "image_folder";
    spec.root = path;
    spec.shuffle = 1;  // a new order of the files every epoch, as Keras's folders
    spec.features.push_back({.name = "image", .decode = "image"});
    return spec;
  }
  if (!fs::exists(path, error)) TANDEM_THROW(IoError, "no data specification '", path, "'");
  refuse_data_file(path);
  return parse_input_spec(read_text_file(path, "data specification", kMaxSpecBytes), path);
}

namespace {

// Decode, resize, crop and normalise one image feature.
Tensor make_image(Tensor t, const InputFeature& f) {
  if (f.decode == "image") {
    DecodeOptions options{.channels = f.channels};
    if (f.resize.size() == 2)
      options = {.channels = f.channels, .min_height = f.resize[0], .min_width = f.resize[1]};
    t = decode_image(t, options);
  }
  if (t.rank() == 2) t = t.reshape(Shape{t.dim(0), t.dim(1), 1});
  if (f.resize.size() == 2) t = resize_image(t, f.resize[0], f.resize[1]);
  if (f.crop.size() == 2) t = center_crop(t, f.crop[0], f.crop[1]);
  const float scale = f.scale.value_or(t.dtype() == DType::u8 ? 1.0f / 255.0f : 1.0f);
  return normalize_image(t, scale, f.mean.empty() ? std::vector<float>{0.0f} : f.mean,
                         f.stddev.empty() ? std::vector<float>{1.0f} : f.stddev);
}

// `make`, whose errors name the file (and record) the element came from
// when the source added its "origin" (IoError: the data is bad).
MapFn naming_origin(std::function<Element(const Element&)> make) {
  return [make = std::move(make)](Element e) {
    if (!e.has("origin")) return make(e);
    try {
      return make(e);
    } catch (const Error& error) {
      TANDEM_THROW(IoError, "'", tensor_bytes(e.at("origin")), "': ", error.what());
    }
  };
}

// The per-example map of a spec: parse, decode and shape its features.
MapFn example_maker(const InputSpec& spec) {
  if (spec.format == "tfrecord") {
    std::vector<FeatureSpec> parse;
    for (const InputFeature& f : spec.features) {
      // Named by the spec's feature, not its source: two features may read
      // one source (with other shapes or dtypes; keyed by source, the last
      // one's parse was both's).
      FeatureSpec p{.name = f.name, .source = f.source};
      if (f.type == "bytes") {
        p.dtype = DType::u8;
      } else {
        p.dtype = f.type == "float" ? DType::f32 : f.dtype;
        p.shape = Shape(f.shape);
        p.variable_length = f.variable_length;
      }
      parse.push_back(std::move(p));
    }
    const std::vector<InputFeature> features = spec.features;
    return naming_origin([parse, features](const Element& record) {
      const Element parsed = parse_example(tensor_bytes(record.at("record")), parse);
      Element out;
      for (size_t i = 0; i < features.size(); ++i) {
        const InputFeature& f = features[i];
        const Tensor& t = parsed.at(parse[i].name);
        out.set(f.name, f.decode == "image" ? make_image(t, f)
                        : f.decode == "raw" ? t.to(f.dtype)
                                            : t);
      }
      return out;
    });
  }
  if (spec.format == "csv") {
    const std::vector<InputFeature> features = spec.features;
    return [features](const Element& row) {
      Element out;
      for (const InputFeature& f : features) {
        if (f.columns.size() == 1) {
          out.set(f.name, row.at(f.columns[0]).to(f.dtype));
        } else {
          out.set(f.name, concat_features(f.columns, f.name)(row).at(f.name));
        }
      }
      return out;
    };
  }
  // idx and image folders: {"image", "label"}.
  InputFeature image{.name = "image", .decode = spec.format == "image_folder" ? "image" : ""};
  for (const InputFeature& f : spec.features) {
    if (f.name == "image") image = f;
  }
  return naming_origin([image](const Element& e) {
    return Element{{"image", make_image(e.at("image"), image)}, {"label", e.at("label")}};
  });
}

}  // namespace

Dataset make_input(const InputSpec& spec, uint64_t seed) {
  Dataset d = Dataset::range(0);
  if (spec.format == "tfrecord") {
    const Compression c =
        spec.detect_compression ? detect_compression(spec.files.front()) : spec.compression;
    d = Dataset::from_tfrecord(spec.files, c, /*with_origin=*/true);
  } else if (spec.format == "csv") {
    // Integer features read their column as i32, the others f32; a column
    // no feature reads stays text (u8, empty allowed): a name or date column
    // stopped the training at its first row.
    CsvOptions options;
    CsvReader header(spec.files.front(), options.delimiter);
    const std::optional<std::vector<std::string>> first = header.next();
    if (!first) TANDEM_THROW(IoError, "CSV file '", spec.files.front(), "' is empty");
    const std::vector<std::string> names = csv_column_names(*first);
    for (const std::string& column : names) {
      CsvColumn c{.name = column, .dtype = DType::u8, .default_value = ""};
      for (const InputFeature& f : spec.features) {
        if (std::find(f.columns.begin(), f.columns.end(), column) == f.columns.end()) continue;
        c.dtype = f.type == "int" && f.columns.size() == 1 ? DType::i32 : DType::f32;
        c.default_value.reset();
      }
      options.columns.push_back(std::move(c));
    }
    for (const InputFeature& f : spec.features) {
      for (const std::string& column : f.columns) {
        if (std::find(names.begin(), names.end(), column) == names.end()) {
          std::string has;
          for (const std::string& n : names) has += (has.empty() ? "'" : ", '") + n + "'";
          TANDEM_THROW(InvalidArgument, spec.path, ": feature '", f.name, "' reads column '",
                       column, "', which '", spec.files.front(), "' does not have (it has ",
                       has.substr(0, 400), ")");
        }
      }
    }
    d = from_csv(spec.files.front(), options);
  } else if (spec.format == "idx") {
    d = Dataset::from_idx(spec.images, spec.labels);
  } else {
    // A folder shuffles its file list: no buffer of image bytes.
    ImageFolderOptions options{.known_classes = spec.known_classes, .with_origin = true};
    if (spec.shuffle > 0 && !spec.cache) options.shuffle_seed = seed;
    d = Dataset::from_image_folder(spec.root, options);
  }
  // Shuffle the records before decoding them (less to hold), unless the
  // decoded examples are cached: then after the cache, to reshuffle each pass.
  if (spec.shuffle > 0 && !spec.cache && spec.format != "image_folder")
    d = d.shuffle(spec.shuffle, seed);
  d = d.map(example_maker(spec), {.num_parallel_calls = spec.parallel});
  if (spec.cache) {
    // A cached image folder was read in class order: its whole pass is the
    // buffer (the cache holds every example already), as its file list's
    // shuffle would have been.
    const int64_t buffer = spec.format == "image_folder"
                               ? std::max<int64_t>(spec.shuffle, d.cardinality())
                               : spec.shuffle;
    d = d.cache();
    if (spec.shuffle > 0) d = d.shuffle(buffer, seed);
  }
  return d;
}

}  // namespace tandem::data
