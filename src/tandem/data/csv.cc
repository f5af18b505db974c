#include "tandem/data/csv.h"

#include <mutex>
#include <set>
#include <string_view>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <streambuf>

#include "tandem/base/error.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {

struct CsvReader::Impl {
  std::string path;
  std::ifstream in;
  char delimiter;
  int64_t line = 1;  // current line of the stream
};

CsvReader::CsvReader(const std::string& path, char delimiter) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->delimiter = delimiter;
  impl_->in.open(path, std::ios::binary);
  if (!impl_->in)
    TANDEM_THROW(IoError, "cannot open CSV file '", path, "': ", std::strerror(errno));
}

CsvReader::~CsvReader() = default;

std::optional<std::vector<std::string>> CsvReader::next() {
  // The stream buffer directly: istream::get() costs a sentry per byte.
  std::streambuf& in = *impl_->in.rdbuf();
  // Skip blank lines between records.
  for (;;) {
    const int c = in.sgetc();
    if (c == EOF) return std::nullopt;
    if (c == '\n') {
      in.sbumpc();
      ++impl_->line;
    } else if (c == '\r') {
      in.sbumpc();
    } else {
      break;
    }
  }
  record_line_ = impl_->line;
  std::vector<std::string> fields(1);
  bool quoted = false;
  // Every byte of the record counts, delimiters and quotes included, so
  // neither a field nor the list of fields outgrows the caps.
  size_t record_bytes = 0;
  const auto take = [&] {
    const int c = in.sbumpc();
    if (c != EOF && ++record_bytes > kMaxCsvRecordBytes) {
      TANDEM_THROW(IoError, "CSV file '", impl_->path, "' line ", record_line_,
                   ": the record is longer than ", kMaxCsvRecordBytes,
                   " bytes (kMaxCsvRecordBytes)",
                   quoted ? "; a quoted field is never closed?" : "");
    }
    return c;
  };
  for (;;) {
    const int c = take();
    if (c == EOF) {
      if (quoted) {
        TANDEM_THROW(IoError, "CSV file '", impl_->path, "' line ", record_line_,
                     ": unterminated quoted field");
      }
      break;
    }
    if (quoted) {
      if (c == '"') {
        if (in.sgetc() == '"') {
          take();
          fields.back() += '"';
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++impl_->line;
        fields.back() += static_cast<char>(c);
      }
      continue;
    }
    if (c == '"' && fields.back().empty()) {
      quoted = true;
    } else if (c == impl_->delimiter) {
      if (fields.size() == kMaxCsvFields) {
        TANDEM_THROW(IoError, "CSV file '", impl_->path, "' line ", record_line_,
                     ": the record has more than ", kMaxCsvFields, " fields (kMaxCsvFields)");
      }
      fields.emplace_back();
    } else if (c == '\n' || c == '\r') {
      // \r\n, \n, or a lone \r (old Mac files: it was dropped, and the
      // whole file read as one record).
      if (c == '\r' && in.sgetc() == '\n') take();
      ++impl_->line;
      break;
    } else {
      fields.back() += static_cast<char>(c);
    }
  }
  return fields;
}

std::string_view csv_trimmed(std::string_view field) {
  const size_t first = field.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return field.substr(first, field.find_last_not_of(" \t") - first + 1);
}

std::vector<std::string> csv_column_names(std::vector<std::string> header) {
  if (!header.empty() && header[0].starts_with("\xEF\xBB\xBF")) header[0].erase(0, 3);
  for (std::string& name : header) name = std::string(csv_trimmed(name));
  return header;
}

namespace {

class CsvNode : public detail::Node {
 public:
  CsvNode(std::string path, CsvOptions options, std::vector<CsvColumn> columns)
      : path_(std::move(path)), options_(std::move(options)), columns_(std::move(columns)) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      CsvNode* node;
      CsvReader reader;
      It(CsvNode* n) : node(n), reader(n->path_, n->options_.delimiter) {
        if (n->options_.header) reader.next();
      }
      std::optional<Element> next() override {
        const auto start = detail::Clock::now();
        auto fields = reader.next();
        if (!fields) return std::nullopt;
        Element e = node->parse_row(*fields, reader.line());
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return e;
      }
    };
    return std::make_unique<It>(this);
  }
  std::string label() const override { return "csv"; }
  // Counted once by splitting the file into records (quoted newlines
  // included); unknown when the file cannot be read.
  int64_t cardinality() const override {
    std::call_once(counted_, [this] {
      try {
        CsvReader reader(path_, options_.delimiter);
        int64_t records = 0;
        while (reader.next()) ++records;
        cardinality_ = std::max<int64_t>(0, records - (options_.header ? 1 : 0));
      } catch (const Error&) {
        cardinality_ = kUnknownCardinality;  // reading it reports why
      }
    });
    return cardinality_;
  }

  Element parse_row(const std::vector<std::string>& fields, int64_t line) const {
    if (fields.size() != columns_.size()) {
      TANDEM_THROW(IoError, "CSV file '", path_, "' line ", line, ": expected ", columns_.size(),
                   " fields, got ", fields.size());
    }
    Element e;
    for (size_t i = 0; i < fields.size(); ++i) {
      const CsvColumn& col = columns_[i];
      std::string text = fields[i];
      if (text.empty() && col.dtype != DType::u8) {
        if (!col.default_value) {
          TANDEM_THROW(IoError, "CSV file '", path_, "' line ", line, ": column '", col.name,
                       "' is empty and has no default");
        }
        text = *col.default_value;
      }
      if (col.dtype == DType::u8) {
        e.set(col.name, bytes_tensor(text));
        continue;
      }
      Tensor t = Tensor::empty(Shape{}, col.dtype);
      bool parsed = false;
      if (col.dtype == DType::i32) {
        const std::optional<int32_t> v = csv_number<int32_t>(text);
        if ((parsed = v.has_value())) t.data<int32_t>()[0] = *v;
      } else {
        const std::optional<float> v = csv_number<float>(text);
        if ((parsed = v.has_value())) t.data<float>()[0] = *v;
      }
      if (!parsed) {
        TANDEM_THROW(IoError, "CSV file '", path_, "' line ", line, ": column '", col.name, "': '",
                     text, "' is not ", col.dtype == DType::i32 ? "an integer" : "a number");
      }
      e.set(col.name, t);
    }
    return e;
  }

 private:
  std::string path_;
  CsvOptions options_;
  std::vector<CsvColumn> columns_;
  mutable std::once_flag counted_;
  mutable int64_t cardinality_ = kUnknownCardinality;
};

}  // namespace

Dataset from_csv(const std::string& path, CsvOptions options) {
  std::vector<CsvColumn> columns = options.columns;
  for (const CsvColumn& c : columns) {
    if (c.dtype != DType::f32 && c.dtype != DType::i32 && c.dtype != DType::u8) {
      TANDEM_THROW(InvalidArgument, "CSV column '", c.name, "': dtype must be f32, i32 or u8, got ",
                   dtype_name(c.dtype));
    }
  }
  // Read the header now: it names the columns, and a missing file fails here.
  CsvReader reader(path, options.delimiter);
  std::optional<std::vector<std::string>> first = reader.next();
  if (options.header) {
    if (!first) TANDEM_THROW(IoError, "CSV file '", path, "' is empty but a header was expected");
    if (columns.empty()) {
      for (const std::string& name : csv_column_names(*first))
        columns.push_back({name, DType::f32, std::nullopt});
    } else if (first->size() != columns.size()) {
      TANDEM_THROW(IoError, "CSV file '", path, "': the header has ", first->size(),
                   " columns, the spec ", columns.size());
    }
  } else if (columns.empty()) {
    const size_t n = first ? first->size() : 0;
    for (size_t i = 0; i < n; ++i)
      columns.push_back({"column" + std::to_string(i), DType::f32, std::nullopt});
  }
  // Each column is a feature of that name: a second one would replace the
  // first in every example without a word.
  std::set<std::string_view> names;
  for (const CsvColumn& c : columns) {
    if (!names.insert(c.name).second)
      TANDEM_THROW(InvalidArgument, "CSV file '", path, "': two columns are named '", c.name, "'");
  }
  return Dataset(std::make_shared<CsvNode>(path, std::move(options), std::move(columns)));
}

}  // namespace tandem::data
