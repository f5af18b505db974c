#include "tandem/interop/detail/safetensors_header.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/base/error.h"

namespace tandem::interop::detail {
namespace {

using json = nlohmann::json;

// The SAX handler: each event is checked against where the header stands.
// Depth 1 is inside the header object, 2 inside a tensor (or the metadata),
// 3 inside a tensor's "shape" or "data_offsets".
class HeaderReader {
 public:
  SafetensorsHeader header;
  std::string error;  // why the parse stopped, when a check stopped it

  bool null() { return other_value("null"); }
  bool boolean(bool) { return other_value("a boolean"); }
  bool number_integer(json::number_integer_t value) {
    return value < 0 ? integer(value, std::nullopt) : integer(value, static_cast<uint64_t>(value));
  }
  bool number_unsigned(json::number_unsigned_t value) {
    const auto as_signed = value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                               ? std::optional<int64_t>(static_cast<int64_t>(value))
                               : std::nullopt;
    return integer(as_signed, value);
  }
  bool number_float(json::number_float_t, const std::string&) {
    return other_value("a number with a fraction");
  }
  bool binary(json::binary_t&) { return other_value("binary data"); }
  bool string(std::string& value);
  bool start_object(size_t);
  bool end_object();
  bool start_array(size_t);
  bool end_array() { return end_container(); }
  bool key(std::string& value);
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

 private:
  enum class Field { none, dtype, shape, offsets, skipped };

  bool skipping() const { return skip_from_ >= 0 || (depth_ == 2 && field_ == Field::skipped); }
  bool fail(const std::string& why) {
    error = why;
    return false;
  }
  std::string tensor() const { return "tensor '" + header.entries.back().name + "'"; }
  std::string field_name() const {
    return field_ == Field::dtype   ? "'dtype'"
           : field_ == Field::shape ? "'shape'"
                                    : "'data_offsets'";
  }
  // A value that is not what its place needs (or one skipped).
  bool other_value(const char* what);
  bool integer(std::optional<int64_t> as_signed, std::optional<uint64_t> as_unsigned);
  bool end_container();

  int depth_ = 0;
  int skip_from_ = -1;  // the depth a skipped container was opened at
  bool in_metadata_ = false;
  bool metadata_seen_ = false;
  std::string key_;  // the last key at depth 1 or (metadata) 2
  Field field_ = Field::none;
  bool dtype_seen_ = false, shape_seen_ = false, offsets_seen_ = false;
  std::vector<uint64_t> offsets_;
};

bool HeaderReader::other_value(const char* what) {
  if (skipping()) {
    if (skip_from_ < 0) field_ = Field::none;
    return true;
  }
  if (depth_ == 0) return fail("the header is not a JSON object");
  if (depth_ == 1) {
    return fail(key_ == kSafetensorsMetadataKey ? "'__metadata__' is not an object"
                                                : "tensor '" + key_ + "' is not an object");
  }
  if (in_metadata_) return fail("'__metadata__' value '" + key_ + "' is not a string");
  if (depth_ == 2) {
    return fail(tensor() + ": " + field_name() +
                (field_ == Field::dtype   ? " is not a string"
                 : field_ == Field::shape ? " is not a list"
                                          : " is not a list of two offsets"));
  }
  return fail(tensor() + ": " + field_name() + " holds " + what + ", not an integer");
}

bool HeaderReader::integer(std::optional<int64_t> as_signed, std::optional<uint64_t> as_unsigned) {
  if (depth_ != 3 || skipping()) return other_value("a number");
  SafetensorsEntry& entry = header.entries.back();
  if (field_ == Field::shape) {
    if (!as_signed) return fail(tensor() + " has a dimension past 2^63");
    if (entry.shape.size() == kMaxSafetensorsRank) {
      return fail(tensor() + " has more than " + std::to_string(kMaxSafetensorsRank) +
                  " dimensions");
    }
    entry.shape.push_back(*as_signed);
    return true;
  }
  if (!as_unsigned) return fail(tensor() + " has a negative data offset");
  if (offsets_.size() == 2) return fail(tensor() + ": 'data_offsets' is not a list of two offsets");
  offsets_.push_back(*as_unsigned);
  return true;
}

bool HeaderReader::string(std::string& value) {
  if (skipping() || depth_ != 2 || (!in_metadata_ && field_ != Field::dtype))
    return other_value("a string");
  if (in_metadata_) {
    header.metadata[key_] = std::move(value);
  } else {
    header.entries.back().dtype = std::move(value);
    field_ = Field::none;
  }
  return true;
}

bool HeaderReader::start_object(size_t) {
  if (depth_ == 0 || skipping()) {
    if (skipping() && skip_from_ < 0) skip_from_ = depth_;
    ++depth_;
    return true;
  }
  if (depth_ != 1) return other_value("an object");
  if (key_ == kSafetensorsMetadataKey) {
    if (metadata_seen_) return fail("'__metadata__' is given twice");
    in_metadata_ = metadata_seen_ = true;
  } else {
    header.entries.push_back({.name = key_});
    dtype_seen_ = shape_seen_ = offsets_seen_ = false;
  }
  ++depth_;
  return true;
}

bool HeaderReader::start_array(size_t) {
  if (skipping()) {
    if (skip_from_ < 0) skip_from_ = depth_;
    ++depth_;
    return true;
  }
  if (depth_ != 2 || in_metadata_ || field_ == Field::dtype) return other_value("a list");
  offsets_.clear();
  ++depth_;
  return true;
}

bool HeaderReader::end_object() {
  if (depth_ == 2 && skip_from_ < 0) {
    if (in_metadata_) {
      in_metadata_ = false;
    } else {
      const char* missing = !dtype_seen_     ? "'dtype'"
                            : !shape_seen_   ? "'shape'"
                            : !offsets_seen_ ? "'data_offsets'"
                                             : nullptr;
      if (missing != nullptr) return fail(tensor() + " has no " + missing);
    }
  }
  return end_container();
}

bool HeaderReader::end_container() {
  --depth_;
  if (depth_ == skip_from_) {
    skip_from_ = -1;
    field_ = Field::none;
  } else if (depth_ == 2 && skip_from_ < 0) {
    if (field_ == Field::offsets) {
      if (offsets_.size() != 2)
        return fail(tensor() + ": 'data_offsets' is not a list of two offsets");
      header.entries.back().begin = offsets_[0];
      header.entries.back().end = offsets_[1];
    }
    field_ = Field::none;
  }
  return true;
}

bool HeaderReader::key(std::string& value) {
  if (skip_from_ >= 0) return true;
  if (depth_ == 1 || in_metadata_) {
    key_ = std::move(value);
    return true;
  }
  bool* seen = value == "dtype"          ? &dtype_seen_
               : value == "shape"        ? &shape_seen_
               : value == "data_offsets" ? &offsets_seen_
                                         : nullptr;
  field_ = value == "dtype"          ? Field::dtype
           : value == "shape"        ? Field::shape
           : value == "data_offsets" ? Field::offsets
                                     : Field::skipped;
  if (seen == nullptr) return true;
  if (*seen) return fail(tensor() + " gives '" + value + "' twice");
  *seen = true;
  return true;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const std::string& text, const std::string& path) {
  HeaderReader reader;
  if (!json::sax_parse(text, &reader))
    TANDEM_THROW(IoError, "'", path, "' has a corrupt header: ", reader.error);
  std::vector<const SafetensorsEntry*> by_name;
  by_name.reserve(reader.header.entries.size());
  for (const SafetensorsEntry& e : reader.header.entries) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (by_name[i]->name == by_name[i - 1]->name) {
      TANDEM_THROW(IoError, "'", path, "' has a corrupt header: tensor '", by_name[i]->name,
                   "' is given twice");
    }
  }
  return std::move(reader.header);
}

}  // namespace tandem::interop::detail
