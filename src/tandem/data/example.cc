#include "tandem/data/example.h"

#include <cstring>
#include <limits>

#include "tandem/base/error.h"

namespace tandem::data {
namespace {

// Protobuf wire-format reader over a byte range.
class Wire {
 public:
  explicit Wire(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return p_ >= end_; }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) throw IoError("Example: truncated varint");
      const auto byte = static_cast<uint8_t>(*p_++);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw IoError("Example: varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_))
      throw IoError("Example: length-delimited field runs past its message");
    std::string_view out(p_, static_cast<size_t>(n));
    p_ += n;
    return out;
  }
  float fixed32_float() {
    if (end_ - p_ < 4) throw IoError("Example: truncated float");
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  // Skips a field of the given wire type.
  void skip(uint32_t type) {
    switch (type) {
      case 0:
        varint();
        return;
      case 1:
        if (end_ - p_ < 8) throw IoError("Example: truncated fixed64");
        p_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        if (end_ - p_ < 4) throw IoError("Example: truncated fixed32");
        p_ += 4;
        return;
      default:
        throw IoError("Example: unsupported wire type " + std::to_string(type));
    }
  }

 private:
  const char* p_;
  const char* end_;
};

Feature decode_feature(std::string_view bytes) {
  Feature f;
  Wire w(bytes);
  while (!w.done()) {
    const uint64_t key = w.varint();
    const auto field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
    if (type != 2 || field < 1 || field > 3) {
      w.skip(type);
      continue;
    }
    Wire list(w.bytes());
    if (field == 1) {
      f.kind = Feature::Kind::bytes_list;
      while (!list.done()) {
        const uint64_t k = list.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {
          f.bytes.emplace_back(list.bytes());
        } else {
          list.skip(static_cast<uint32_t>(k & 7));
        }
      }
    } else if (field == 2) {
      f.kind = Feature::Kind::float_list;
      while (!list.done()) {
        const uint64_t k = list.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {  // packed
          f.packed = true;
          Wire packed(list.bytes());
          while (!packed.done()) f.floats.push_back(packed.fixed32_float());
        } else if ((k >> 3) == 1 && (k & 7) == 5) {
          f.floats.push_back(list.fixed32_float());
        } else {
          list.skip(static_cast<uint32_t>(k & 7));
        }
      }
    } else {
      f.kind = Feature::Kind::int64_list;
      while (!list.done()) {
        const uint64_t k = list.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {
          f.packed = true;
          Wire packed(list.bytes());
          while (!packed.done()) f.int64s.push_back(static_cast<int64_t>(packed.varint()));
        } else if ((k >> 3) == 1 && (k & 7) == 0) {
          f.int64s.push_back(static_cast<int64_t>(list.varint()));
        } else {
          list.skip(static_cast<uint32_t>(k & 7));
        }
      }
    }
  }
  return f;
}

const Feature* find(const Example& example, const std::string& name) {
  const Feature* found = nullptr;
  for (const auto& [n, f] : example) {
    if (n == name) found = &f;  // protobuf maps: the last entry wins
  }
  return found;
}

}  // namespace

size_t Feature::count() const {
  switch (kind) {
    case Kind::bytes_list:
      return bytes.size();
    case Kind::float_list:
      return floats.size();
    case Kind::int64_list:
      return int64s.size();
    default:
      return 0;
  }
}

std::string_view feature_kind_name(Feature::Kind kind) {
  switch (kind) {
    case Feature::Kind::bytes_list:
      return "bytes_list";
    case Feature::Kind::float_list:
      return "float_list";
    case Feature::Kind::int64_list:
      return "int64_list";
    default:
      return "none";
  }
}

Example decode_example(std::string_view serialized) {
  Example example;
  Wire w(serialized);
  while (!w.done()) {
    const uint64_t key = w.varint();
    if ((key >> 3) != 1 || (key & 7) != 2) {
      w.skip(static_cast<uint32_t>(key & 7));
      continue;
    }
    Wire features(w.bytes());
    while (!features.done()) {
      const uint64_t fk = features.varint();
      if ((fk >> 3) != 1 || (fk & 7) != 2) {
        features.skip(static_cast<uint32_t>(fk & 7));
        continue;
      }
      Wire entry(features.bytes());
      std::string name;
      Feature feature;
      while (!entry.done()) {
        const uint64_t ek = entry.varint();
        if ((ek >> 3) == 1 && (ek & 7) == 2) {
          name = std::string(entry.bytes());
        } else if ((ek >> 3) == 2 && (ek & 7) == 2) {
          feature = decode_feature(entry.bytes());
        } else {
          entry.skip(static_cast<uint32_t>(ek & 7));
        }
      }
      example.emplace_back(std::move(name), std::move(feature));
    }
  }
  return example;
}

namespace {

// Protobuf wire-format writing.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// A length-delimited field.
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_varint(out, (uint64_t{field} << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

std::string encode_feature(const Feature& f) {
  std::string list;
  switch (f.kind) {
    case Feature::Kind::bytes_list:
      for (const std::string& b : f.bytes) put_bytes(list, 1, b);
      break;
    case Feature::Kind::float_list:
      if (!f.floats.empty()) {
        put_bytes(list, 1,
                  std::string_view(reinterpret_cast<const char*>(f.floats.data()),
                                   f.floats.size() * sizeof(float)));
      }
      break;
    case Feature::Kind::int64_list:
      if (!f.int64s.empty()) {
        std::string packed;
        for (int64_t v : f.int64s) put_varint(packed, static_cast<uint64_t>(v));
        put_bytes(list, 1, packed);
      }
      break;
    case Feature::Kind::none:
      return {};
  }
  std::string out;
  put_bytes(out, static_cast<uint32_t>(f.kind), list);  // bytes_list 1, float_list 2, int64_list 3
  return out;
}

}  // namespace

std::string encode_example(const Example& example) {
  std::string features;
  for (const auto& [name, feature] : example) {
    std::string entry;
    put_bytes(entry, 1, name);
    put_bytes(entry, 2, encode_feature(feature));
    put_bytes(features, 1, entry);
  }
  std::string out;
  put_bytes(out, 1, features);
  return out;
}

Element parse_example(std::string_view serialized, const std::vector<FeatureSpec>& spec) {
  const Example example = decode_example(serialized);
  Element out;
  for (const FeatureSpec& s : spec) {
    const std::string& key = s.source.empty() ? s.name : s.source;
    const Feature* f = find(example, key);
    const bool absent = f == nullptr || f->kind == Feature::Kind::none;
    if (s.dtype != DType::u8 && s.dtype != DType::f32 && s.dtype != DType::i32) {
      TANDEM_THROW(InvalidArgument, "feature '", key, "': spec dtype must be f32, i32 or u8, got ",
                   dtype_name(s.dtype));
    }
    if (absent) {
      if (!s.default_value) {
        TANDEM_THROW(InvalidArgument, "Example lacks required feature '", key,
                     f ? "' (present with no value list)" : "'");
      }
      const Shape shape =
          s.variable_length ? Shape{static_cast<int64_t>(s.default_value->size())} : s.shape;
      if (static_cast<int64_t>(s.default_value->size()) != shape.numel()) {
        TANDEM_THROW(InvalidArgument, "feature '", key, "': default has ", s.default_value->size(),
                     " values, shape ", shape.to_string(), " needs ", shape.numel());
      }
      out.set(s.name, Tensor::from_floats(shape, *s.default_value, s.dtype));
      continue;
    }
    if (s.dtype == DType::u8) {
      if (f->kind != Feature::Kind::bytes_list || f->bytes.size() != 1) {
        TANDEM_THROW(InvalidArgument, "feature '", key, "' is ", feature_kind_name(f->kind),
                     " with ", f->count(), " value(s); the spec expects one bytes_list value");
      }
      out.set(s.name, bytes_tensor(f->bytes[0]));
      continue;
    }
    const bool numeric_ok = f->kind == Feature::Kind::float_list
                                ? s.dtype == DType::f32
                                : f->kind == Feature::Kind::int64_list;
    if (!numeric_ok) {
      TANDEM_THROW(InvalidArgument, "feature '", key, "' is ", feature_kind_name(f->kind),
                   " but the spec expects ",
                   s.dtype == DType::i32 ? "int64_list" : "float_list or int64_list");
    }
    const auto count = static_cast<int64_t>(f->count());
    const Shape shape = s.variable_length ? Shape{count} : s.shape;
    if (count != shape.numel()) {
      TANDEM_THROW(InvalidArgument, "feature '", key, "' has ", count, " values; the spec's shape ",
                   shape.to_string(), " needs ", shape.numel());
    }
    Tensor t = Tensor::empty(shape, s.dtype);
    if (f->kind == Feature::Kind::float_list) {
      std::memcpy(t.raw_data(), f->floats.data(), f->floats.size() * sizeof(float));
    } else if (s.dtype == DType::i32) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t v = f->int64s[i];
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          TANDEM_THROW(InvalidArgument, "feature '", key, "' value ", v,
                       " does not fit i32 (use f32)");
        }
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
      }
    } else {
      for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = static_cast<float>(f->int64s[i]);
    }
    out.set(s.name, t);
  }
  return out;
}

MapFn example_parser(std::vector<FeatureSpec> spec, std::string record_feature) {
  return [spec = std::move(spec), record_feature = std::move(record_feature)](Element e) {
    const Tensor& record = e.at(record_feature);
    return parse_example(
        std::string_view(static_cast<const char*>(record.raw_data()), record.nbytes()), spec);
  };
}

}  // namespace tandem::data
