#include "tandem/data/text_corpus.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/data/example.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

constexpr const char* kKjvProgram = "/usr/bin/bible";
constexpr const char* kKjvInstall =
    "the King James Bible corpus needs Debian's bible-kjv package (apt-get install bible-kjv)";

// One Example per sequence: tokens = s[0, T), targets = s[1, T].
std::string sequence_record(const std::string& text, size_t begin, int64_t context) {
  Feature tokens, targets;
  tokens.kind = Feature::Kind::int64_list;
  targets.kind = Feature::Kind::int64_list;
  tokens.packed = targets.packed = true;
  for (int64_t i = 0; i < context; ++i) {
    tokens.int64s.push_back(static_cast<unsigned char>(text[begin + static_cast<size_t>(i)]));
    targets.int64s.push_back(static_cast<unsigned char>(text[begin + static_cast<size_t>(i) + 1]));
  }
  const Example example{{"tokens", std::move(tokens)}, {"targets", std::move(targets)}};
  return encode_example(example);
}

int64_t sequence_count(size_t bytes, int64_t context) {
  const auto T = static_cast<size_t>(context);
  return bytes < T + 1 ? 0 : static_cast<int64_t>((bytes - 1) / T);
}

// Writes the sequences of text as shards named PREFIX-NNNNN-of-NNNNN.tfrecord.
std::vector<std::string> write_shards(const std::string& text, const std::string& prefix,
                                      const std::filesystem::path& dir,
                                      const TextCorpusOptions& o) {
  const int64_t n = sequence_count(text.size(), o.context);
  const int64_t shards = (n + o.records_per_shard - 1) / o.records_per_shard;
  std::vector<std::string> files;
  for (int64_t s = 0; s < shards; ++s) {
    std::vector<std::string> records;
    for (int64_t k = s * o.records_per_shard; k < std::min(n, (s + 1) * o.records_per_shard); ++k)
      records.push_back(sequence_record(text, static_cast<size_t>(k * o.context), o.context));
    const std::string name = fmt::format("{}-{:05d}-of-{:05d}.tfrecord", prefix, s, shards);
    write_tfrecord((dir / name).string(), records);
    files.push_back(name);
  }
  return files;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) TANDEM_THROW(IoError, "cannot write '", path.string(), "'");
}

std::string specification(const std::string& prefix, int64_t context, bool shuffle) {
  return fmt::format(
      "# Byte-level sequences of {0} tokens (tandem data text).\n"
      "format = \"tfrecord\"\n"
      "files = [\"{1}-*.tfrecord\"]\n"
      "{2}"
      "input = \"tokens\"\n"
      "label = \"targets\"\n"
      "[features.tokens]\n"
      "type = \"int64\"\n"
      "shape = [{0}]\n"
      "[features.targets]\n"
      "type = \"int64\"\n"
      "shape = [{0}]\n",
      context, prefix, shuffle ? "shuffle = 10000\n" : "");
}

}  // namespace

std::string read_kjv_bible() {
  if (!std::filesystem::exists(kKjvProgram))
    TANDEM_THROW(IoError, kKjvInstall, ": ", kKjvProgram, " was not found");
  FILE* pipe = ::popen("/usr/bin/bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
  if (pipe == nullptr) TANDEM_THROW(IoError, kKjvInstall, ": cannot run ", kKjvProgram);
  std::string raw;
  char chunk[1 << 16];
  size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0) raw.append(chunk, got);
  const int status = ::pclose(pipe);
  if (status != 0 || raw.empty())
    TANDEM_THROW(IoError, kKjvInstall, ": ", kKjvProgram, " failed (status ", status, ")");
  // "Ge1:1 In the beginning..." -> "In the beginning...".
  std::string text;
  text.reserve(raw.size());
  size_t at = 0;
  while (at < raw.size()) {
    size_t end = raw.find('\n', at);
    if (end == std::string::npos) end = raw.size();
    const size_t space = raw.find(' ', at);
    if (space != std::string::npos && space < end) {
      text.append(raw, space + 1, end - space - 1);
      text.push_back('\n');
    }
    at = end + 1;
  }
  return text;
}

TextCorpusSummary write_text_corpus(const std::string& text, const std::string& output_dir,
                                    const TextCorpusOptions& o) {
  if (o.context < 1)
    TANDEM_THROW(InvalidArgument, "context (--context) must be at least 1, got ", o.context);
  if (!(o.validation_fraction > 0.0 && o.validation_fraction < 1.0)) {
    TANDEM_THROW(InvalidArgument,
                 "validation_fraction (--validation-fraction) must be in (0, 1), got ",
                 o.validation_fraction);
  }
  if (o.records_per_shard < 1)
    TANDEM_THROW(InvalidArgument,
                 "records_per_shard (--records-per-shard) must be at least 1, got ",
                 o.records_per_shard);
  size_t cut =
      static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - o.validation_fraction));
  const size_t line_end = text.find('\n', cut);
  if (line_end != std::string::npos) cut = line_end + 1;
  const std::string train = text.substr(0, cut), validation = text.substr(cut);
  if (sequence_count(train.size(), o.context) < 1 ||
      sequence_count(validation.size(), o.context) < 1) {
    TANDEM_THROW(InvalidArgument, "a text of ", text.size(),
                 " bytes is too short for sequences of ", o.context, " tokens in both splits (",
                 train.size(), " and ", validation.size(), " bytes)");
  }
  const std::filesystem::path dir(output_dir);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) TANDEM_THROW(IoError, "cannot create '", output_dir, "': ", error.message());
  // Shards an earlier run wrote there (with other shard counts) would match
  // the specifications' globs beside the new ones.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if ((name.starts_with("train-") || name.starts_with("validation-")) &&
        name.find("-of-") != std::string::npos && name.ends_with(".tfrecord"))
      std::filesystem::remove(entry.path());
  }
  TextCorpusSummary summary;
  summary.bytes = static_cast<int64_t>(text.size());
  summary.train_bytes = static_cast<int64_t>(train.size());
  summary.validation_bytes = static_cast<int64_t>(validation.size());
  summary.train_sequences = sequence_count(train.size(), o.context);
  summary.validation_sequences = sequence_count(validation.size(), o.context);
  summary.files = write_shards(train, "train", dir, o);
  for (std::string& f : write_shards(validation, "validation", dir, o)) summary.files.push_back(f);
  write_file(dir / "train.toml", specification("train", o.context, true));
  write_file(dir / "validation.toml", specification("validation", o.context, false));
  const nlohmann::json info = {{"bytes", summary.bytes},
                               {"context", o.context},
                               {"train_bytes", summary.train_bytes},
                               {"validation_bytes", summary.validation_bytes},
                               {"train_sequences", summary.train_sequences},
                               {"validation_sequences", summary.validation_sequences},
                               {"files", summary.files}};
  write_file(dir / "corpus.json", info.dump(2) + "\n");
  summary.files.insert(summary.files.end(), {"train.toml", "validation.toml", "corpus.json"});
  return summary;
}

}  // namespace tandem::data
