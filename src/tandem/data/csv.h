#pragma once
// CSV source: one element per row, one scalar tensor per column (f32, i32, or
// u8 bytes for text), with an optional header, quoted fields ("a,b" and ""
// escapes, newlines inside quotes) and per-column defaults for empty fields.

#include <optional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

struct CsvColumn {
  std::string name;
  DType dtype = DType::f32;                  // f32, i32, or u8 (the text's bytes)
  std::optional<std::string> default_value;  // for empty fields; none: empty is an error
};

struct CsvOptions {
  bool header = true;  // first row names the columns
  char delimiter = ',';
  // Column types in file order. Empty: every column f32, named by the header
  // (or "column0", "column1", ... without one).
  std::vector<CsvColumn> columns;
};

// Throws IoError naming the file and line for a missing file, a row with the
// wrong number of fields, an unparsable number or an empty field without default.
Dataset from_csv(const std::string& path, CsvOptions options = {});

// Splits one CSV record into fields; exposed for tandem data inspect.
class CsvReader {
 public:
  CsvReader(const std::string& path, char delimiter);
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;
  // The next record's fields, or nullopt at the end. line() is its first line.
  std::optional<std::vector<std::string>> next();
  int64_t line() const { return record_line_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t record_line_ = 0;
};

}  // namespace tandem::data
