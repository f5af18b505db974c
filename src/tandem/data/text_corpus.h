#pragma once
// Byte-level text corpora for language models: a text cut into training
// sequences of context + 1 bytes (the model reads the first context bytes
// and predicts the last context: "tokens" and "targets", int64 features of
// TFRecord Examples), with a held-out validation split at the end of the
// text, written as TFRecord shards with the data specifications that read
// them (docs/data.md).

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

// The King James Bible from Debian's bible-kjv package (the `bible` program,
// `bible -f 'Gen1:1-Rev22:21'`), one verse per line without its reference,
// about 4.3 MB. Throws IoError naming the package to install when the
// program is missing or fails.
std::string read_kjv_bible();

struct TextCorpusOptions {
  int64_t context = 128;
  // The part of the text held out, from the end; the cut moves forward to
  // the next line break so that no line is split.
  double validation_fraction = 0.05;
  int64_t records_per_shard = 8192;
};

struct TextCorpusSummary {
  int64_t bytes = 0;  // of the whole text
  int64_t train_bytes = 0, validation_bytes = 0;
  int64_t train_sequences = 0, validation_sequences = 0;
  std::vector<std::string> files;  // written, relative to the output folder
};

// Writes train-NNNNN-of-NNNNN.tfrecord, validation-NNNNN-of-NNNNN.tfrecord
// (records_per_shard each), train.toml, validation.toml and corpus.json into
// output_dir (created), removing the shards of those names already there
// (an earlier corpus's, which the specifications' globs would take too).
// Sequences start every `context` bytes (consecutive sequences share one
// byte: the last target of one is the first token of the next). Throws
// InvalidArgument for a context < 1, a validation fraction outside (0, 1)
// or records_per_shard < 1, and for a text too short to give at least one
// sequence on each side; IoError when the folder cannot be written.
TextCorpusSummary write_text_corpus(const std::string& text, const std::string& output_dir,
                                    const TextCorpusOptions& options = {});

}  // namespace tandem::data
