#include <gtest/gtest.h>
#include <png.h>

#include <cstring>
#include <set>

#include <filesystem>
#include <fstream>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/csv.h"
#include "tandem/data/example.h"
#include "tandem/data/image.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (fs::path(TANDEM_TEST_TMPDIR) / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

std::string csv_error(const std::string& path, CsvOptions options = {}) {
  try {
    Iterator it = from_csv(path, options).iterator();
    while (it.next()) {
    }
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(Csv, TypedColumnsQuotesAndDefaults) {
  const std::string path = write_file("typed.csv",
                                      "id,score,name\n"
                                      "1,0.5,plain\n"
                                      "2, -3.25 ,\"with, comma\"\n"
                                      "\n"
                                      "3,,\"quote \"\"inside\"\"\nand newline\"\r\n");
  CsvOptions options{
      .columns = {{"id", DType::i32}, {"score", DType::f32, "7.5"}, {"name", DType::u8}}};
  Iterator it = from_csv(path, options).iterator();
  std::vector<int32_t> ids;
  std::vector<float> scores;
  std::vector<std::string> names;
  while (auto e = it.next()) {
    ids.push_back(e->at("id").to_ints()[0]);
    scores.push_back(e->at("score").item());
    names.push_back(tensor_bytes(e->at("name")));
  }
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(scores, (std::vector<float>{0.5f, -3.25f, 7.5f}));
  EXPECT_EQ(names,
            (std::vector<std::string>{"plain", "with, comma", "quote \"inside\"\nand newline"}));
  // A leading '+', as other tools write positive numbers, in both types.
  Iterator signed_values = from_csv(write_file("plus.csv", "a,b\n+2, +1.5e1\n"),
                                    {.columns = {{"a", DType::i32}, {"b", DType::f32}}})
                               .iterator();
  const auto row = signed_values.next();
  ASSERT_TRUE(row);
  EXPECT_EQ(row->at("a").to_ints()[0], 2);
  EXPECT_EQ(row->at("b").item(), 15.0f);
  // Without a column spec: f32 columns named by the header.
  Iterator plain = from_csv(write_file("plain.csv", "a,b\n1,2\n3,4\n")).batch(2).iterator();
  auto batch = plain.next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("b").to_floats(), (std::vector<float>{2, 4}));
}

TEST(Csv, BadRowsNameFileLineAndColumn) {
  std::string message = csv_error(write_file("fields.csv", "a,b\n1,2\n3\n"));
  EXPECT_NE(message.find("fields.csv' line 3: expected 2 fields, got 1"), std::string::npos)
      << message;
  message = csv_error(write_file("number.csv", "a,b\n1,2\n3,x4\n"));
  EXPECT_NE(message.find("line 3: column 'b': 'x4' is not a number"), std::string::npos) << message;
  message = csv_error(write_file("double_sign.csv", "a\n+-1\n"));
  EXPECT_NE(message.find("'+-1' is not a number"), std::string::npos) << message;
  message = csv_error(write_file("int.csv", "a\n1.5\n"), {.columns = {{"a", DType::i32}}});
  EXPECT_NE(message.find("'1.5' is not an integer"), std::string::npos) << message;
  message = csv_error(write_file("empty_field.csv", "a,b\n1,\n"));
  EXPECT_NE(message.find("column 'b' is empty and has no default"), std::string::npos) << message;
  message = csv_error(write_file("quote.csv", "a\n\"open\n"));
  EXPECT_NE(message.find("unterminated quoted field"), std::string::npos) << message;
  EXPECT_THROW(from_csv("/nonexistent.csv"), IoError);
  EXPECT_THROW(from_csv(write_file("hdr.csv", "a,b\n"), {.columns = {{"a"}}}), IoError);
  // A second column of one name replaced the first in every example.
  try {
    from_csv(write_file("twice.csv", "x,x,label\n1,2,0\n"));
    ADD_FAILURE() << "two columns named x were read";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("twice.csv': two columns are named 'x'"),
              std::string::npos)
        << e.what();
  }
  // One unnamed column (pandas' index) is a name like any other.
  EXPECT_EQ(from_csv(write_file("index.csv", ",a\n0,1\n")).cardinality(), 1);
}

Tensor gradient_image(int64_t h, int64_t w, int64_t c) {
  Tensor t = Tensor::empty(Shape{h, w, c}, DType::u8);
  auto* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>((i * 7) % 256);
  return t;
}

TEST(Image, PngRoundTripsExactlyAndJpegApproximately) {
  for (int64_t c : {1, 3}) {
    const Tensor image = gradient_image(13, 17, c);
    EXPECT_EQ(decode_image(encode_png(image)).to_floats(), image.to_floats());
    const Tensor smooth = Tensor::full(Shape{16, 24, c}, 120.0f, DType::u8);
    const Tensor back = decode_image(encode_jpeg(smooth, 95));
    EXPECT_EQ(back.shape(), smooth.shape());
    for (float v : back.to_floats()) EXPECT_NEAR(v, 120.0f, 3.0f);
  }
  EXPECT_EQ(decode_image(encode_png(gradient_image(5, 5, 3)), 1).shape(), (Shape{5, 5, 1}));
  EXPECT_THROW(decode_image(bytes_tensor("not an image")), IoError);
  Tensor truncated = encode_png(gradient_image(20, 20, 3));
  EXPECT_THROW(decode_image(truncated.slice(0, truncated.numel() / 2)), IoError);
}

// A PNG written with libpng's simplified writer in `format`, from `pixels`
// (bytes, or 16-bit samples for the linear formats).
Tensor png_of(png_uint_32 format, int width, const void* pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = 1;
  image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, nullptr));
  std::string bytes(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels, 0, nullptr));
  bytes.resize(size);
  return bytes_tensor(bytes);
}

// As stored, as TensorFlow decodes them: 16-bit samples to their high byte
// (libpng's simplified reader took them for linear light: 0x8000 -> 186),
// alpha dropped (it was composited onto black), and RGB to gray by BT.601
// (as JPEG's and PIL's; pure blue was 76).
TEST(Image, PngsDecodeAsStoredWhateverTheirDepthAndAlpha) {
  const uint16_t wide[] = {0x8000, 0x4000};
  EXPECT_EQ(decode_image(png_of(PNG_FORMAT_LINEAR_Y, 2, wide)).to_floats(),
            (std::vector<float>{128, 64}));
  const uint8_t rgba[] = {200, 100, 50, 0, 200, 100, 50, 128};
  const Tensor no_alpha = decode_image(png_of(PNG_FORMAT_RGBA, 2, rgba));
  EXPECT_EQ(no_alpha.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(no_alpha.to_floats(), (std::vector<float>{200, 100, 50, 200, 100, 50}));
  const uint8_t rgb[] = {0, 0, 255, 255, 0, 0, 128, 128, 128};
  EXPECT_EQ(decode_image(png_of(PNG_FORMAT_RGB, 3, rgb), 1).to_floats(),
            (std::vector<float>{29, 76, 128}));
  const uint8_t gray[] = {7, 250};
  EXPECT_EQ(decode_image(png_of(PNG_FORMAT_GRAY, 2, gray), 3).to_floats(),
            (std::vector<float>{7, 7, 7, 250, 250, 250}));
  // Adam7-interlaced (5 x 4 RGB, written by hand): pixel (x, y) is
  // (40 x, 60 y, 20 (x + y)) mod 256.
  const std::string interlaced(
      "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x05"
      "\x00\x00\x00\x04\x08\x02\x00\x00\x01\xbe\x56\x52\x81\x00\x00\x00\x3b\x49\x44\x41"
      "\x54\x78\x9c\x0d\x87\x41\x01\x00\x20\x10\xc2\x08\x61\x08\x42\x10\x82\x10\x86\x20"
      "\x84\x21\x2e\x04\x01\xbd\xed\xb3\x01\xcb\xc0\x2b\x81\xd0\xf1\x24\xdb\x27\x10\x18"
      "\x25\x17\xd0\xa1\x68\x29\xf2\x68\xbf\x62\xed\xde\x34\xd3\xf7\x01\xf6\xfb\x12\xc1"
      "\x3c\xce\xb2\xa3\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82",
      116);
  std::vector<float> expected;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 5; ++x)
      for (int v : {40 * x, 60 * y, 20 * (x + y)}) expected.push_back(static_cast<float>(v % 256));
  EXPECT_EQ(decode_image(bytes_tensor(interlaced)).to_floats(), expected);
}

TEST(Image, CifarPngsFromTheTFRecordFileDecode) {
  // Every PNG in the TensorFlow-written file is 32x32 RGB.
  const Dataset d =
      Dataset::from_tfrecord({TANDEM_TESTDATA_DIR "/tfrecord/tfx_cifar10_test_png.tfrecord"})
          .map(example_parser({{.name = "image", .dtype = DType::u8},
                               {.name = "label", .dtype = DType::i32, .shape = Shape{}}}))
          .map(decode_image_fn(), {.num_parallel_calls = 2})
          .batch(32);
  Iterator it = d.iterator();
  int batches = 0;
  while (auto e = it.next()) {
    EXPECT_EQ(e->at("image").shape(), (Shape{32, 32, 32, 3}));
    for (int32_t label : e->at("label").to_ints()) EXPECT_TRUE(label >= 0 && label < 10);
    ++batches;
  }
  EXPECT_EQ(batches, 4);
}

TEST(Image, AugmentationsAreDeterministicAcrossParallelism) {
  std::vector<Element> images;
  for (int i = 0; i < 64; ++i) images.push_back(Element{{"image", gradient_image(8, 8, 3)}});
  auto pipeline = [&](int parallel) {
    return Dataset::from_elements(images)
        .map(random_crop_with_padding(2, 11), {.num_parallel_calls = parallel})
        .map(random_flip_horizontal(12), {.num_parallel_calls = parallel})
        .map(normalize({0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}))
        .map(cast_to(DType::bf16));
  };
  auto collect = [](const Dataset& d) {
    std::vector<std::vector<float>> out;
    Iterator it = d.iterator();
    while (auto e = it.next()) out.push_back(e->at("image").to_floats());
    return out;
  };
  const auto one = collect(pipeline(1));
  EXPECT_EQ(one, collect(pipeline(4)));
  EXPECT_EQ(one, collect(pipeline(kAutotune)));
  // The augmentations really vary between elements.
  int distinct = 0;
  for (size_t i = 1; i < one.size(); ++i) distinct += one[i] != one[0];
  EXPECT_GT(distinct, 32);
  Iterator it = pipeline(1).iterator();
  EXPECT_EQ(it.next()->at("image").dtype(), DType::bf16);
  EXPECT_THROW(element_random_seed(), Error);
}

TEST(Image, CropAndFlipMoveThePixels) {
  Tensor image = Tensor::zeros(Shape{4, 4, 1}, DType::u8);
  image.data<uint8_t>()[0] = 200;  // top-left
  // Find a seed whose flip happens: the pixel moves to the top-right.
  bool flipped = false;
  for (uint64_t seed = 0; seed < 8 && !flipped; ++seed) {
    Iterator it = Dataset::from_elements({Element{{"image", image}}})
                      .map(random_flip_horizontal(seed))
                      .iterator();
    const std::vector<float> out = it.next()->at("image").to_floats();
    flipped = out[3] == 200.0f;
    if (!flipped) {
      EXPECT_EQ(out[0], 200.0f);
    }
  }
  EXPECT_TRUE(flipped);
  Iterator crop = Dataset::from_elements({Element{{"image", image}}})
                      .map(random_crop_with_padding(0, 1))
                      .iterator();
  EXPECT_EQ(crop.next()->at("image").to_floats(), image.to_floats());  // no padding: identity
  // Padding 1: a window of the zero-padded image, shifted by at most one
  // pixel each way; over seeds, the pixel at (1, 1) lands in several places
  // and nothing else changes.
  Tensor centred = Tensor::zeros(Shape{4, 4, 1}, DType::u8);
  centred.data<uint8_t>()[1 * 4 + 1] = 200;
  std::set<int> places;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Iterator it = Dataset::from_elements({Element{{"image", centred}}})
                      .map(random_crop_with_padding(1, seed))
                      .iterator();
    const std::vector<float> out = it.next()->at("image").to_floats();
    ASSERT_EQ(out.size(), 16u);
    int lit = -1, count = 0;
    for (int i = 0; i < 16; ++i) {
      if (out[i] == 200.0f) lit = i;
      count += out[i] != 0.0f;
    }
    ASSERT_EQ(count, 1) << "seed " << seed;
    EXPECT_LE(lit / 4, 2) << "seed " << seed;
    EXPECT_LE(lit % 4, 2) << "seed " << seed;
    places.insert(lit);
  }
  EXPECT_GE(places.size(), 4u);
}

}  // namespace
}  // namespace tandem::data
