#pragma once
// CSV source: one element per row, one scalar tensor per column (f32, i32, or
// u8 bytes for text), with an optional header, quoted fields ("a,b" and ""
// escapes, newlines inside quotes) and per-column defaults for empty fields.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/base/parse_number.h"
#include "tandem/data/dataset.h"

namespace tandem::data {

// A record (one line, or several when a quoted field spans lines) longer than
// this many bytes (32 MiB), or with more fields than kMaxCsvFields, is refused
// with an IoError naming the file and line, so a file without newlines (or
// with an unclosed quote) is never read into memory whole. (A string growing
// by doubling briefly holds twice its length: reading a record at the cap
// takes up to 64 MB.)
inline constexpr size_t kMaxCsvRecordBytes = size_t{32} << 20;
inline constexpr size_t kMaxCsvFields = size_t{1} << 20;

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
// wrong number of fields, an unparsable number, an empty field without
// default, or a record above kMaxCsvRecordBytes or kMaxCsvFields.
Dataset from_csv(const std::string& path, CsvOptions options = {});

// A field without the spaces and tabs around it, as spreadsheet exports
// often have them: how the reader takes both names and values.
std::string_view csv_trimmed(std::string_view field);

// A field's number as the reader takes it: csv_trimmed, then one number of
// T (parse_number's rule, and a leading '+' as other tools write it:
// "+1.5", not "+-1"); nothing otherwise.
template <typename T>
std::optional<T> csv_number(std::string_view field) {
  std::string_view text = csv_trimmed(field);
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') text.remove_prefix(1);
  return parse_number<T>(text);
}

// A header row's fields as column names: a leading UTF-8 byte-order mark
// (Excel's "CSV UTF-8") taken off, and each name csv_trimmed.
std::vector<std::string> csv_column_names(std::vector<std::string> header);

// Splits one CSV record into fields; exposed for tandem data inspect.
class CsvReader {
 public:
  CsvReader(const std::string& path, char delimiter);
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;
  // The next record's fields, or nullopt at the end. line() is its first line.
  // Throws IoError for an unterminated quote or a record above the caps.
  std::optional<std::vector<std::string>> next();
  int64_t line() const { return record_line_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t record_line_ = 0;
};

}  // namespace tandem::data
