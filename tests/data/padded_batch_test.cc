// Dataset::padded_batch (tf.data semantics) over variable-length features from
// from_elements and from tf.train.Example records, and encode_example, which
// the tests use to write such records.
#include <gtest/gtest.h>

#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/data/example.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

Tensor ints(std::vector<int32_t> values) {
  return Tensor::from_ints(Shape{static_cast<int64_t>(values.size())}, values);
}

Tensor scalar(int32_t v) {
  return Tensor::from_ints(Shape{}, std::vector<int32_t>{v});
}

// Elements {"tokens": i32 (n,), "label": i32 ()} for the given lengths; token
// j of element i is 10 i + j + 1 (never the padding 0).
Dataset token_lists(const std::vector<int>& lengths) {
  std::vector<Element> elements;
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> tokens;
    for (int j = 0; j < lengths[i]; ++j) tokens.push_back(static_cast<int32_t>(10 * i + j + 1));
    elements.push_back(
        Element{{"tokens", ints(tokens)}, {"label", scalar(static_cast<int32_t>(i))}});
  }
  return Dataset::from_elements(std::move(elements));
}

std::vector<Element> all(const Dataset& d) {
  std::vector<Element> out;
  Iterator it = d.iterator();
  while (auto e = it.next()) out.push_back(std::move(*e));
  return out;
}

template <typename E>
std::string error_of(const Dataset& d) {
  try {
    all(d);
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

TEST(PaddedBatch, PadsEachBatchToItsLongestElement) {
  const std::vector<Element> batches = all(token_lists({3, 1, 4, 2, 5}).padded_batch(2));
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].at("tokens").shape(), (Shape{2, 3}));
  EXPECT_EQ(batches[0].at("tokens").to_ints(), (std::vector<int32_t>{1, 2, 3, 11, 0, 0}));
  EXPECT_EQ(batches[0].at("label").shape(), (Shape{2}));
  EXPECT_EQ(batches[0].at("label").to_ints(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(batches[1].at("tokens").shape(), (Shape{2, 4}));
  EXPECT_EQ(batches[1].at("tokens").to_ints(),
            (std::vector<int32_t>{21, 22, 23, 24, 31, 32, 0, 0}));
  EXPECT_EQ(batches[2].at("tokens").shape(), (Shape{1, 5}));
  EXPECT_EQ(all(token_lists({3, 1, 4, 2, 5}).padded_batch(2, {.drop_remainder = true})).size(), 2u);
  EXPECT_EQ(token_lists({1}).padded_batch(2, {.drop_remainder = true}).describe(),
            "elements -> padded_batch(2, drop_remainder)");
  // Empty lists pad too; a batch of only empty lists has a zero-size dimension.
  const std::vector<Element> empty = all(token_lists({0, 2, 0, 0}).padded_batch(2));
  EXPECT_EQ(empty[0].at("tokens").to_ints(), (std::vector<int32_t>{0, 0, 11, 12}));
  EXPECT_EQ(empty[1].at("tokens").shape(), (Shape{2, 0}));
}

TEST(PaddedBatch, FixedShapesAndPaddingValues) {
  const Dataset d = token_lists({3, 1, 4});
  const std::vector<Element> fixed = all(
      d.padded_batch(2, {.padded_shapes = {{"tokens", {5}}}, .padding_values = {{"tokens", -1}}}));
  ASSERT_EQ(fixed.size(), 2u);
  EXPECT_EQ(fixed[0].at("tokens").to_ints(),
            (std::vector<int32_t>{1, 2, 3, -1, -1, 11, -1, -1, -1, -1}));
  EXPECT_EQ(fixed[1].at("tokens").shape(), (Shape{1, 5}));
  // -1: the batch's largest; a scalar's padded shape is {}.
  EXPECT_EQ(all(d.padded_batch(3, {.padded_shapes = {{"tokens", {-1}}, {"label", {}}}}))[0]
                .at("tokens")
                .shape(),
            (Shape{3, 4}));
  std::string message =
      error_of<ShapeError>(d.padded_batch(3, {.padded_shapes = {{"tokens", {3}}}}));
  EXPECT_NE(message.find("feature 'tokens' has size 4 in dimension 0, more than its padded size 3"),
            std::string::npos)
      << message;
  message = error_of<InvalidArgument>(d.padded_batch(3, {.padded_shapes = {{"tokens", {4, 4}}}}));
  EXPECT_NE(message.find("padded shape for feature 'tokens' has 2 dimensions, its elements have 1"),
            std::string::npos)
      << message;
  message = error_of<InvalidArgument>(d.padded_batch(3, {.padding_values = {{"token", 1}}}));
  EXPECT_NE(message.find("padding_values names feature 'token' but the elements have"),
            std::string::npos)
      << message;
  message = error_of<InvalidArgument>(d.padded_batch(3, {.padding_values = {{"tokens", 0.5}}}));
  EXPECT_NE(message.find("padding value 0.5 for feature 'tokens' does not fit its dtype i32"),
            std::string::npos)
      << message;
  EXPECT_THROW(d.padded_batch(0), InvalidArgument);
  EXPECT_THROW(d.padded_batch(2, {.padded_shapes = {{"tokens", {-2}}}}), InvalidArgument);
}

TEST(PaddedBatch, EveryDimensionAndDtype) {
  // (h, w) f32 blocks of 1 + index: padded to the largest height and width.
  auto block = [](int64_t h, int64_t w) {
    std::vector<float> v(static_cast<size_t>(h * w));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
    return Tensor::from_floats(Shape{h, w}, v);
  };
  const std::vector<Element> grids =
      all(Dataset::from_elements({Element{{"grid", block(1, 3)}}, Element{{"grid", block(2, 1)}}})
              .padded_batch(2, {.padding_values = {{"grid", 0.5}}}));
  ASSERT_EQ(grids.size(), 1u);
  EXPECT_EQ(grids[0].at("grid").shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(grids[0].at("grid").to_floats(),
            (std::vector<float>{1, 2, 3, 0.5, 0.5, 0.5, 1, 0.5, 0.5, 2, 0.5, 0.5}));
  // u8 bytes padded with 255; bf16 with 1.5 (exact in bf16); f16 by default 0.
  const std::vector<Element> mixed =
      all(Dataset::from_elements({Element{{"bytes", bytes_tensor("ab")},
                                          {"half", Tensor::full(Shape{1}, 2.0f, DType::bf16)},
                                          {"f16", Tensor::full(Shape{2}, 3.0f, DType::f16)}},
                                  Element{{"bytes", bytes_tensor("cde")},
                                          {"half", Tensor::full(Shape{2}, 4.0f, DType::bf16)},
                                          {"f16", Tensor::full(Shape{1}, 5.0f, DType::f16)}}})
              .padded_batch(2, {.padding_values = {{"bytes", 255}, {"half", 1.5}}}));
  EXPECT_EQ(mixed[0].at("bytes").dtype(), DType::u8);
  EXPECT_EQ(mixed[0].at("bytes").to_floats(), (std::vector<float>{'a', 'b', 255, 'c', 'd', 'e'}));
  EXPECT_EQ(mixed[0].at("half").dtype(), DType::bf16);
  EXPECT_EQ(mixed[0].at("half").to_floats(), (std::vector<float>{2, 1.5, 4, 4}));
  EXPECT_EQ(mixed[0].at("f16").to_floats(), (std::vector<float>{3, 3, 5, 0}));
  // i64 exactly, padding past float's 24 bits included.
  const auto wide = [](std::vector<int32_t> v) { return ints(std::move(v)).to(DType::i64); };
  const std::vector<Element> longs =
      all(Dataset::from_elements({Element{{"ids", wide({7})}}, Element{{"ids", wide({8, 9})}}})
              .padded_batch(2, {.padding_values = {{"ids", 16777217.0}}}));
  ASSERT_EQ(longs[0].at("ids").dtype(), DType::i64);
  const int64_t* ids = longs[0].at("ids").data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 4), (std::vector<int64_t>{7, 16777217, 8, 9}));
  const Dataset u8 = Dataset::from_elements({Element{{"bytes", bytes_tensor("a")}}});
  EXPECT_THROW(all(u8.padded_batch(1, {.padding_values = {{"bytes", 256}}})), InvalidArgument);
  EXPECT_THROW(all(u8.padded_batch(1, {.padding_values = {{"bytes", -1}}})), InvalidArgument);
  // Ranks and dtypes must agree; the message names the feature.
  std::string message = error_of<ShapeError>(
      Dataset::from_elements({Element{{"grid", block(1, 3)}}, Element{{"grid", ints({1, 2})}}})
          .padded_batch(2));
  EXPECT_NE(message.find("feature 'grid' of element 1 is i32 (2,) but element 0's is f32 (1, 3)"),
            std::string::npos)
      << message;
  message = error_of<ShapeError>(
      Dataset::from_elements({Element{{"a", ints({1})}}, Element{{"b", ints({1})}}})
          .padded_batch(2));
  EXPECT_NE(message.find("element 1 has features (b: i32 (1,))"), std::string::npos) << message;
  // batch() still refuses elements of different shapes; gray beside colour
  // images get the channels hint, other shapes the resize one.
  EXPECT_THROW(all(token_lists({1, 2}).batch(2)), ShapeError);
  const auto image = [](int64_t height, int64_t channels) {
    return Element{{"image", Tensor::zeros(Shape{height, 2, channels})}};
  };
  message = error_of<ShapeError>(Dataset::from_elements({image(2, 1), image(2, 3)}).batch(2));
  EXPECT_NE(message.find("gray and colour images in one batch"), std::string::npos) << message;
  message = error_of<ShapeError>(Dataset::from_elements({image(2, 3), image(4, 3)}).batch(2));
  EXPECT_NE(message.find("resize = [HEIGHT, WIDTH]"), std::string::npos) << message;
}

TEST(PaddedBatch, VariableLengthListsFromExamples) {
  // Records with int64 lists of lengths 2, 0, 3, 1 and a scalar label.
  std::vector<std::string> records;
  const std::vector<std::vector<int64_t>> lists = {{5, -7}, {}, {1, 2, 3}, {9}};
  for (size_t i = 0; i < lists.size(); ++i) {
    Example example;
    Feature ids{.kind = Feature::Kind::int64_list, .int64s = lists[i]};
    Feature label{.kind = Feature::Kind::int64_list, .int64s = {static_cast<int64_t>(i)}};
    example.emplace_back("ids", ids);
    example.emplace_back("label", label);
    records.push_back(encode_example(example));
  }
  const std::string path = (fs::path(TANDEM_TEST_TMPDIR) / "padded_examples.tfrecord").string();
  write_tfrecord(path, records);
  const Dataset d =
      Dataset::from_tfrecord({path})
          .map(example_parser({{.name = "ids", .dtype = DType::i32, .variable_length = true},
                               {.name = "label", .dtype = DType::i32, .shape = Shape{}}}))
          .padded_batch(3, {.padding_values = {{"ids", -1}}});
  const std::vector<Element> batches = all(d);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].at("ids").shape(), (Shape{3, 3}));
  EXPECT_EQ(batches[0].at("ids").to_ints(), (std::vector<int32_t>{5, -7, -1, -1, -1, -1, 1, 2, 3}));
  EXPECT_EQ(batches[0].at("label").to_ints(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(batches[1].at("ids").to_ints(), (std::vector<int32_t>{9}));
}

TEST(Example, EncodeExampleRoundTrips) {
  Example example;
  example.emplace_back("text", Feature{.kind = Feature::Kind::bytes_list, .bytes = {"hello", ""}});
  example.emplace_back("floats",
                       Feature{.kind = Feature::Kind::float_list, .floats = {1.5f, -2.0f, 3e20f}});
  example.emplace_back(
      "ints", Feature{.kind = Feature::Kind::int64_list, .int64s = {0, -1, int64_t{1} << 40}});
  example.emplace_back("empty", Feature{.kind = Feature::Kind::float_list});
  example.emplace_back("kindless", Feature{});
  const Example back = decode_example(encode_example(example));
  ASSERT_EQ(back.size(), example.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].first, example[i].first);
    EXPECT_EQ(back[i].second.kind, example[i].second.kind) << back[i].first;
    EXPECT_EQ(back[i].second.bytes, example[i].second.bytes) << back[i].first;
    EXPECT_EQ(back[i].second.floats, example[i].second.floats) << back[i].first;
    EXPECT_EQ(back[i].second.int64s, example[i].second.int64s) << back[i].first;
  }
  EXPECT_TRUE(back[1].second.packed);
  // parse_example reads it like a TensorFlow-written record.
  const Element e = parse_example(encode_example(example),
                                  {{.name = "ints", .dtype = DType::f32, .variable_length = true}});
  EXPECT_EQ(e.at("ints").to_floats(),
            (std::vector<float>{0, -1, static_cast<float>(int64_t{1} << 40)}));
}

}  // namespace
}  // namespace tandem::data
