// `tandem data inspect FILE`: what a TFRecord, IDX or CSV file holds: the
// record count and the first records as JSON (feature names, dtypes, shapes,
// values; bytes as length and leading hex, and as text when they are valid
// UTF-8, as TensorFlow prints an Example), before training on it; for a
// folder of class sub-folders, its classes and images.
#include <zlib.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "tandem/base/error.h"
#include "tandem/base/utf8.h"
#include "tandem/cli/commands.h"
#include "tandem/data/crc32c.h"
#include "tandem/data/csv.h"
#include "tandem/data/example.h"
#include "tandem/data/idx.h"
#include "tandem/data/image_folder.h"
#include "tandem/data/text_corpus.h"
#include "tandem/data/tfrecord.h"

namespace tandem::cli {
namespace {

struct InspectOptions {
  std::string path;
  int records = 3;
  std::string format = "auto";
  int max_values = 64;
};

std::string hex(const std::string& bytes, size_t limit) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < limit; ++i) {
    out += digits[static_cast<unsigned char>(bytes[i]) >> 4];
    out += digits[static_cast<unsigned char>(bytes[i]) & 15];
  }
  return out;
}

// Bytes of a bytes feature shown as text at most (cut at a character boundary).
constexpr size_t kTextLimit = 64;

// The bytes as text when they are valid UTF-8 (the first kTextLimit bytes,
// cut back to a whole character; `cut` says whether anything was left out).
std::optional<std::string> utf8_text(std::string_view bytes, bool& cut) {
  size_t keep = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = utf8_sequence(bytes, i);
    if (n == 0) return std::nullopt;
    i += n;
    if (i <= kTextLimit) keep = i;
  }
  cut = keep < bytes.size();
  return std::string(bytes.substr(0, keep));
}

// The first bytes of the file after gzip decompression (if any).
std::string head_bytes(const std::string& path, size_t n) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) TANDEM_THROW(IoError, "cannot open '", path, "'");
  std::string out(n, '\0');
  const int got = gzread(f, out.data(), static_cast<unsigned>(n));
  gzclose(f);
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return out;
}

std::string detect_format(const std::string& path) {
  // The name first: a CSV whose first bytes pass for a zlib header ("H,W,...")
  // was read as a compressed TFRecord.
  const std::string file = std::filesystem::path(path).filename().string();
  if (file.ends_with(".csv.gz") || file.ends_with(".tsv") || file.ends_with(".tsv.gz")) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "': tandem reads CSV as uncompressed, comma-separated text (decompress it, or "
                 "convert tabs to commas)");
  }
  if (file.ends_with(".csv") || file.ends_with(".txt")) return "csv";
  const std::string head = head_bytes(path, 12);
  if (head.size() >= 12) {
    uint32_t crc;
    std::memcpy(&crc, head.data() + 8, 4);
    if (crc == data::masked_crc32c(head.data(), 8)) return "tfrecord";
  }
  if (data::detect_compression(path) == data::Compression::zlib) return "tfrecord";
  if (head.size() >= 4 && head[0] == 0 && head[1] == 0 && head[3] >= 1 && head[3] <= 8)
    return "idx";
  // Anything else read as CSV "worked" on a data specification, an image
  // or a model file: only a file named as CSV is taken for one (above).
  if (file.ends_with(".toml")) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is a TOML file (a data specification or model file): inspect the data files "
                 "it names, or its folder of images");
  }
  if (file.ends_with(".png") || file.ends_with(".jpg") || file.ends_with(".jpeg")) {
    TANDEM_THROW(InvalidArgument, "'", path,
                 "' is an image: inspect its folder of class sub-folders instead");
  }
  TANDEM_THROW(InvalidArgument, "cannot tell the format of '", path,
               "': not TFRecord or IDX, and not named .csv (give --format csv to read it as CSV)");
}

nlohmann::json feature_json(const data::Feature& f, int max_values) {
  nlohmann::json j = {{"type", std::string(data::feature_kind_name(f.kind))}, {"count", f.count()}};
  nlohmann::json values = nlohmann::json::array();
  switch (f.kind) {
    case data::Feature::Kind::int64_list:
      j["dtype"] = "int64";
      for (size_t i = 0; i < f.int64s.size() && static_cast<int>(i) < max_values; ++i)
        values.push_back(f.int64s[i]);
      break;
    case data::Feature::Kind::float_list:
      j["dtype"] = "float32";
      for (size_t i = 0; i < f.floats.size() && static_cast<int>(i) < max_values; ++i)
        values.push_back(f.floats[i]);
      break;
    case data::Feature::Kind::bytes_list:
      j["dtype"] = "bytes";
      for (size_t i = 0; i < f.bytes.size() && static_cast<int>(i) < max_values; ++i) {
        nlohmann::json v = {{"length", f.bytes[i].size()}, {"hex", hex(f.bytes[i], 16)}};
        bool cut = false;
        if (auto text = utf8_text(f.bytes[i], cut)) {
          v["text"] = *text;
          if (cut) v["text_truncated"] = true;
        }
        values.push_back(v);
      }
      break;
    default:
      j["dtype"] = "none";
  }
  j["shape"] = {f.count()};
  j["values"] = values;
  if (static_cast<int64_t>(f.count()) > max_values) j["truncated"] = true;
  return j;
}

nlohmann::json inspect_tfrecord(const InspectOptions& o) {
  const data::Compression compression = data::detect_compression(o.path);
  data::TFRecordReader reader(o.path, compression);
  nlohmann::json first = nlohmann::json::array();
  int64_t count = 0;
  while (auto record = reader.next()) {
    if (count < o.records) {
      nlohmann::json r = {{"index", count}, {"length", record->size()}};
      try {
        nlohmann::json features = nlohmann::json::object();
        for (const auto& [name, f] : data::decode_example(*record))
          features[name] = feature_json(f, o.max_values);
        r["features"] = features;
      } catch (const IoError& e) {
        r["not_an_example"] = e.what();
        r["hex"] = hex(*record, 32);
      }
      first.push_back(r);
    }
    ++count;
  }
  const char* names[] = {"none", "gzip", "zlib"};
  return {{"file", o.path},
          {"format", "tfrecord"},
          {"compression", names[static_cast<int>(compression)]},
          {"records", count},
          {"first", first}};
}

nlohmann::json inspect_idx(const InspectOptions& o) {
  const Tensor t = data::read_idx(o.path);
  nlohmann::json first = nlohmann::json::array();
  const int64_t rows = t.rank() > 0 ? t.dim(0) : 0;
  std::vector<int64_t> row_shape = t.shape().to_vector();
  if (!row_shape.empty()) row_shape.erase(row_shape.begin());
  for (int64_t i = 0; i < rows && i < o.records; ++i) {
    const std::vector<float> values = t.slice(i, i + 1).to_floats();
    nlohmann::json v = nlohmann::json::array();
    for (size_t k = 0; k < values.size() && static_cast<int>(k) < o.max_values; ++k)
      v.push_back(values[k]);
    nlohmann::json r = {{"index", i}, {"shape", row_shape}, {"values", v}};
    if (static_cast<int>(values.size()) > o.max_values) r["truncated"] = true;
    first.push_back(r);
  }
  return {{"file", o.path},
          {"format", "idx"},
          {"dtype", std::string(dtype_name(t.dtype()))},
          {"shape", t.shape().to_vector()},
          {"records", rows},
          {"first", first}};
}

nlohmann::json inspect_csv(const InspectOptions& o) {
  data::CsvReader reader(o.path, ',');
  auto first_row = reader.next();
  if (!first_row) TANDEM_THROW(IoError, "CSV file '", o.path, "' is empty");
  const std::vector<std::string> header = data::csv_column_names(*first_row);
  // Infer each column's dtype from every row: i32, f32 or bytes.
  std::vector<std::string> kinds(header.size(), "i32");
  nlohmann::json first = nlohmann::json::array();
  int64_t count = 0;
  while (auto fields = reader.next()) {
    if (fields->size() != header.size()) {
      TANDEM_THROW(IoError, "CSV file '", o.path, "' line ", reader.line(), ": expected ",
                   header.size(), " fields, got ", fields->size());
    }
    // The reader's own rule: the value without surrounding spaces, whole.
    for (size_t c = 0; c < fields->size(); ++c) {
      const std::string& field = (*fields)[c];
      if (data::csv_trimmed(field).empty()) continue;
      if (kinds[c] == "i32" && !data::csv_number<int32_t>(field)) kinds[c] = "f32";
      if (kinds[c] == "f32" && !data::csv_number<float>(field)) kinds[c] = "bytes";
    }
    if (count < o.records) {
      nlohmann::json r = {{"index", count}, {"line", reader.line()}};
      nlohmann::json values = nlohmann::json::object();
      // Text that is not UTF-8 (a Latin-1 export) escaped: JSON holds UTF-8 only.
      for (size_t c = 0; c < fields->size(); ++c)
        values[escape_invalid_utf8(header[c])] = escape_invalid_utf8((*fields)[c]);
      r["fields"] = values;
      first.push_back(r);
    }
    ++count;
  }
  nlohmann::json columns = nlohmann::json::array();
  for (size_t c = 0; c < header.size(); ++c)
    columns.push_back({{"name", escape_invalid_utf8(header[c])}, {"dtype", kinds[c]}});
  return {{"file", o.path},
          {"format", "csv"},
          {"columns", columns},
          {"records", count},
          {"first", first}};
}

// A folder of class sub-folders (an image folder): its classes, how many
// images each has, and the first files.
nlohmann::json inspect_image_folder(const InspectOptions& o) {
  const data::ImageFolderIndex index = data::index_image_folder(o.path);
  nlohmann::json classes = nlohmann::json::array();
  for (size_t label = 0; label < index.class_names.size(); ++label) {
    const auto count =
        std::count(index.labels.begin(), index.labels.end(), static_cast<int32_t>(label));
    classes.push_back({{"label", label},
                       {"name", escape_invalid_utf8(index.class_names[label])},
                       {"images", count}});
  }
  nlohmann::json first = nlohmann::json::array();
  for (size_t i = 0; i < index.files.size() && static_cast<int>(i) < o.records; ++i)
    first.push_back({{"file", escape_invalid_utf8(index.files[i])}, {"label", index.labels[i]}});
  return {{"format", "image_folder"},
          {"path", o.path},
          {"images", index.files.size()},
          {"classes", classes},
          {"first", first}};
}

int run_inspect(const InspectOptions& o) {
  if (o.records < 0) TANDEM_THROW(InvalidArgument, "--records must be >= 0, got ", o.records);
  if (o.max_values < 0)
    TANDEM_THROW(InvalidArgument, "--max-values must be >= 0, got ", o.max_values);
  std::error_code error;
  if (std::filesystem::is_directory(o.path, error)) {
    if (o.format != "auto" && o.format != "image_folder") {
      TANDEM_THROW(InvalidArgument, "'", o.path, "' is a folder, not a ", o.format, " file");
    }
    fmt::print("{}\n", inspect_image_folder(o).dump(2));
    return 0;
  }
  {
    std::ifstream probe(o.path);
    if (!probe) TANDEM_THROW(IoError, "cannot open '", o.path, "'");
  }
  const std::string format = o.format == "auto" ? detect_format(o.path) : o.format;
  nlohmann::json out;
  if (format == "tfrecord") {
    out = inspect_tfrecord(o);
  } else if (format == "idx") {
    out = inspect_idx(o);
  } else if (format == "csv") {
    out = inspect_csv(o);
  } else {
    TANDEM_THROW(InvalidArgument, "--format: unknown format '", format,
                 "' (expected auto, tfrecord, idx, csv or image_folder)");
  }
  fmt::print("{}\n", out.dump(2));
  return 0;
}

struct TextOptions {
  std::string corpus;
  std::string output;
  data::TextCorpusOptions corpus_options;
};

int run_text(const TextOptions& o) {
  std::string text;
  if (o.corpus == "kjv") {
    text = data::read_kjv_bible();
  } else {
    std::ifstream in(o.corpus, std::ios::binary);
    if (!in) TANDEM_THROW(IoError, "--corpus: cannot open '", o.corpus, "' (or use kjv)");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) TANDEM_THROW(IoError, "--corpus: cannot read '", o.corpus, "'");
  }
  const data::TextCorpusSummary s = data::write_text_corpus(text, o.output, o.corpus_options);
  fmt::print(
      "{}: {} bytes; train {} bytes = {} sequences, validation {} bytes = {} sequences of {} "
      "tokens\nwrote {} files to {} (train.toml, validation.toml: the data specifications)\n",
      o.corpus, s.bytes, s.train_bytes, s.train_sequences, s.validation_bytes,
      s.validation_sequences, o.corpus_options.context, s.files.size(), o.output);
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("data", "Look at datasets");
  command->require_subcommand(1);
  CLI::App* inspect =
      command->add_subcommand("inspect",
                              "Print what a TFRecord, IDX or CSV file, or an image folder, holds, "
                              "as JSON");
  auto o = std::make_shared<InspectOptions>();
  inspect
      ->add_option("file", o->path,
                   "The file (gzip/zlib compression is detected), or a folder of class "
                   "sub-folders of images")
      ->required();
  inspect->add_option("--records,-n", o->records, "How many records to print")
      ->capture_default_str();
  inspect->add_option("--format", o->format, "auto, tfrecord, idx, csv or image_folder")
      ->capture_default_str();
  inspect->add_option("--max-values", o->max_values, "Values printed per feature")
      ->capture_default_str();
  CLI::App* text = command->add_subcommand(
      "text", "Cut a text into byte-level TFRecord sequences for language models (gpt)");
  auto t = std::make_shared<TextOptions>();
  text->add_option("--corpus", t->corpus,
                   "kjv (the King James Bible, Debian's bible-kjv package) or a text file")
      ->required();
  text->add_option("--output,-o", t->output, "Folder for the shards and specifications")
      ->required();
  text->add_option("--context", t->corpus_options.context, "Tokens per sequence")
      ->capture_default_str();
  text->add_option("--validation-fraction", t->corpus_options.validation_fraction,
                   "Share of the text held out at its end")
      ->capture_default_str();
  text->add_option("--records-per-shard", t->corpus_options.records_per_shard,
                   "Sequences per TFRecord file")
      ->capture_default_str();
  return {command, [o, t, text]() {
            if (text->parsed()) return run_text(*t);
            return run_inspect(*o);
          }};
}

}  // namespace tandem::cli
