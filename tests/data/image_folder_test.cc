// Dataset::from_image_folder over folders the tests write (PNG and JPEG
// files from encode_png/encode_jpeg), and the single-image helpers: resize,
// centre crop, normalise, scaled JPEG decoding and the decoded-size cap.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "tandem/base/error.h"
#include "tandem/data/detail/node.h"
#include "tandem/data/distribute.h"
#include "tandem/data/image.h"
#include "tandem/data/image_folder.h"
#include "tandem/kernels/resize.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder under the test directory.
fs::path fresh_folder(const std::string& name) {
  const fs::path p = fs::path(TANDEM_TEST_TMPDIR) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// An RGB image whose pixels differ with `seed`.
Tensor test_image(int64_t h, int64_t w, int seed) {
  Tensor t = Tensor::empty(Shape{h, w, 3}, DType::u8);
  auto* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>((i * 5 + seed * 31) % 256);
  return t;
}

// A smooth image (for JPEG, whose losses are small on gradients).
Tensor smooth_image(int64_t h, int64_t w) {
  Tensor t = Tensor::empty(Shape{h, w, 3}, DType::u8);
  auto* p = t.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < 3; ++c)
        p[(y * w + x) * 3 + c] = static_cast<uint8_t>(40 + 2 * y + x + 30 * c);
    }
  }
  return t;
}

// root/cat/{a.JPG, b.png, c.jpeg} (+ files that are not images or hidden,
// and a nested folder), root/dog/x.png, a hidden .git/ folder, a stray file.
fs::path make_pets(const std::string& name) {
  const fs::path root = fresh_folder(name);
  write_bytes(root / "cat" / "b.png", tensor_bytes(encode_png(test_image(4, 5, 1))));
  write_bytes(root / "cat" / "a.JPG", tensor_bytes(encode_jpeg(smooth_image(8, 8), 95)));
  write_bytes(root / "cat" / "c.jpeg", tensor_bytes(encode_jpeg(smooth_image(6, 10), 95)));
  write_bytes(root / "cat" / "notes.txt", "not an image");
  write_bytes(root / "cat" / "._b.png", "a macOS resource fork");
  write_bytes(root / "cat" / "nested" / "d.png", tensor_bytes(encode_png(test_image(2, 2, 9))));
  write_bytes(root / "dog" / "x.png", tensor_bytes(encode_png(test_image(3, 7, 2))));
  write_bytes(root / ".git" / "y.png", tensor_bytes(encode_png(test_image(2, 2, 3))));
  write_bytes(root / "readme.txt", "a file at the root");
  return root;
}

struct Item {
  int32_t label;
  Shape shape;  // decoded
};

std::vector<Item> read_all(const Dataset& d) {
  std::vector<Item> out;
  Iterator it = d.map(decode_image_fn()).iterator();
  while (auto e = it.next()) {
    EXPECT_EQ(e->at("label").shape(), Shape{});
    EXPECT_EQ(e->at("label").dtype(), DType::i32);
    out.push_back({e->at("label").to_ints()[0], e->at("image").shape()});
  }
  return out;
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

TEST(ImageFolder, ClassesLabelsAndFilesInOrder) {
  const fs::path root = make_pets("folder_pets");
  EXPECT_EQ(image_folder_class_names(root.string()), (std::vector<std::string>{"cat", "dog"}));
  const ImageFolderIndex index = index_image_folder(root.string());
  EXPECT_EQ(index.files,
            (std::vector<std::string>{
                (root / "cat" / "a.JPG").string(), (root / "cat" / "b.png").string(),
                (root / "cat" / "c.jpeg").string(), (root / "dog" / "x.png").string()}));
  EXPECT_EQ(index.labels, (std::vector<int32_t>{0, 0, 0, 1}));

  const Dataset d = Dataset::from_image_folder(root.string());
  EXPECT_EQ(d.node()->files(), index.files);
  EXPECT_EQ(d.describe(), "image_folder(4 files, 2 classes)");
  // The image feature is the file's bytes, undecoded.
  Iterator raw = d.iterator();
  auto first = raw.next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->at("image").dtype(), DType::u8);
  EXPECT_EQ(tensor_bytes(first->at("image")), [&] {
    std::ifstream in(index.files[0], std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }());
  const std::vector<Item> items = read_all(d);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].shape, (Shape{8, 8, 3}));
  EXPECT_EQ(items[1].shape, (Shape{4, 5, 3}));
  EXPECT_EQ(items[2].shape, (Shape{6, 10, 3}));
  EXPECT_EQ(items[3].shape, (Shape{3, 7, 3}));
  EXPECT_EQ(items[3].label, 1);
  // PNG pixels come back exactly.
  Iterator decoded = d.skip(1).map(decode_image_fn()).iterator();
  EXPECT_EQ(decoded.next()->at("image").to_floats(), test_image(4, 5, 1).to_floats());
  // Two passes give the same elements.
  EXPECT_EQ(read_all(d).size(), 4u);
}

// A class folder named in Latin-1 (not UTF-8) is refused when the folder
// is read, naming it: the run's checkpoints record class names as JSON,
// whose writer threw at the first save.
TEST(ImageFolder, ClassFolderNamesThatAreNotUtf8AreRefused) {
  const fs::path root = fresh_folder("folder_latin1");
  write_bytes(root / "caf\xe9" / "x.png", tensor_bytes(encode_png(test_image(3, 3, 1))));
  write_bytes(root / "tea" / "y.png", tensor_bytes(encode_png(test_image(3, 3, 2))));
  const std::string message =
      testing::error_message<InvalidArgument>([&] { image_folder_class_names(root.string()); });
  testing::expect_contains(message, "class folder 'caf\\xe9'");
  testing::expect_contains(message, "not UTF-8");
}

TEST(ImageFolder, ClassNamesAndExtensionsOptions) {
  const fs::path root = make_pets("folder_options");
  // Explicit order: dog is label 0 and comes first.
  const Dataset swapped =
      Dataset::from_image_folder(root.string(), {.class_names = {"dog", "cat"}});
  const std::vector<Item> items = read_all(swapped);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].label, 0);
  EXPECT_EQ(items[0].shape, (Shape{3, 7, 3}));
  EXPECT_EQ(items[1].label, 1);
  // A subset of the classes.
  EXPECT_EQ(read_all(Dataset::from_image_folder(root.string(), {.class_names = {"dog"}})).size(),
            1u);
  // Only PNGs ("png" without its dot, any case).
  const ImageFolderIndex png = index_image_folder(root.string(), {.extensions = {"PNG"}});
  EXPECT_EQ(png.files, (std::vector<std::string>{(root / "cat" / "b.png").string(),
                                                 (root / "dog" / "x.png").string()}));
  // Other endings when asked for; dog/ then has none.
  EXPECT_THROW(index_image_folder(root.string(), {.extensions = {".txt"}}), IoError);
  EXPECT_EQ(
      index_image_folder(root.string(), {.class_names = {"cat"}, .extensions = {".txt"}}).files,
      (std::vector<std::string>{(root / "cat" / "notes.txt").string()}));
}

// A validation folder for a model trained on other classes: labels are the
// model's, whichever folders this root lacks; a folder the model does not
// know is refused, naming it.
TEST(ImageFolder, KnownClassesKeepTheModelsLabels) {
  const fs::path root = make_pets("folder_known");  // cat, dog
  const ImageFolderIndex index =
      index_image_folder(root.string(), {.known_classes = {"bird", "cat", "dog", "fish"}});
  EXPECT_EQ(index.labels, (std::vector<int32_t>{1, 1, 1, 2}));
  EXPECT_EQ(index.missing_classes, (std::vector<std::string>{"bird", "fish"}));
  EXPECT_EQ(index.class_names, (std::vector<std::string>{"bird", "cat", "dog", "fish"}));
  const std::vector<Item> items =
      read_all(Dataset::from_image_folder(root.string(), {.known_classes = {"dog", "cat"}}));
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].label, 0);  // in label order: dog's file first
  EXPECT_EQ(items[0].shape, (Shape{3, 7, 3}));
  EXPECT_EQ(items[1].label, 1);
  EXPECT_EQ(items[3].label, 1);
  const std::string unknown = error_of<InvalidArgument>([&] {
    index_image_folder(root.string(), {.known_classes = {"cat", "bird"}});
  });
  EXPECT_NE(unknown.find("class folder(s) dog that the model does not know"), std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("cat, bird"), std::string::npos) << unknown;
  EXPECT_THROW(index_image_folder(root.string(), {.known_classes = {"bird", "fish", "cat", "dog"},
                                                  .extensions = {".gif"}}),
               IoError);
  EXPECT_THROW(
      index_image_folder(root.string(), {.class_names = {"cat"}, .known_classes = {"cat", "dog"}}),
      InvalidArgument);
}

TEST(ImageFolder, BadFoldersAndOptionsNameThePath) {
  const fs::path root = make_pets("folder_bad");
  std::string message = error_of<IoError>([] { Dataset::from_image_folder("/nonexistent/pets"); });
  EXPECT_NE(message.find("'/nonexistent/pets' does not exist"), std::string::npos) << message;
  message = error_of<IoError>([&] { Dataset::from_image_folder((root / "readme.txt").string()); });
  EXPECT_NE(message.find("readme.txt' is not a folder"), std::string::npos) << message;
  const fs::path empty = fresh_folder("folder_empty");
  write_bytes(empty / "stray.png", tensor_bytes(encode_png(test_image(2, 2, 0))));
  message = error_of<IoError>([&] { Dataset::from_image_folder(empty.string()); });
  EXPECT_NE(message.find("has no class sub-folders"), std::string::npos) << message;
  // A class folder without images (its only file has the wrong extension).
  write_bytes(root / "emu" / "emu.gif", "GIF89a");
  message = error_of<IoError>([&] { Dataset::from_image_folder(root.string()); });
  EXPECT_NE(message.find((root / "emu").string() + "' has no images (.jpg, .jpeg, .png)"),
            std::string::npos)
      << message;
  fs::remove_all(root / "emu");
  message = error_of<InvalidArgument>([&] {
    Dataset::from_image_folder(root.string(), {.class_names = {"cat", "bird"}});
  });
  EXPECT_NE(message.find("class 'bird' has no folder '" + (root / "bird").string() +
                         "' (the sub-folders are: cat, dog)"),
            std::string::npos)
      << message;
  message = error_of<InvalidArgument>([&] {
    Dataset::from_image_folder(root.string(), {.class_names = {"cat", "cat"}});
  });
  EXPECT_NE(message.find("'cat' is given twice"), std::string::npos) << message;
  EXPECT_THROW(Dataset::from_image_folder(root.string(), {.class_names = {"../folder_bad"}}),
               InvalidArgument);
  EXPECT_THROW(Dataset::from_image_folder(root.string(), {.extensions = {}}), InvalidArgument);
}

TEST(ImageFolder, VanishedOrUnreadableFileFailsAtNext) {
  const fs::path root = make_pets("folder_vanish");
  const Dataset d = Dataset::from_image_folder(root.string());
  fs::remove(root / "cat" / "b.png");
  Iterator it = d.iterator();
  ASSERT_TRUE(it.next());  // a.JPG
  const std::string message = error_of<IoError>([&] { it.next(); });
  EXPECT_NE(message.find("cannot open image file '" + (root / "cat" / "b.png").string() + "'"),
            std::string::npos)
      << message;
  // A file replaced by a folder cannot be read either.
  fs::create_directories(root / "cat" / "b.png");
  Iterator again = d.iterator();
  ASSERT_TRUE(again.next());
  EXPECT_THROW(again.next(), IoError);
}

TEST(ImageFolder, FileAutoShardingSplitsTheImageFiles) {
  const fs::path root = make_pets("folder_shard");
  const Dataset d = Dataset::from_image_folder(root.string()).map(decode_image_fn());
  std::vector<std::vector<int32_t>> labels(2);
  std::vector<std::vector<Shape>> shapes(2);
  for (int w = 0; w < 2; ++w) {
    Iterator it = auto_shard(d, 2, w, AutoShardPolicy::file).iterator();
    while (auto e = it.next()) {
      labels[w].push_back(e->at("label").to_ints()[0]);
      shapes[w].push_back(e->at("image").shape());
    }
  }
  // Files 0 and 2 (a.JPG, c.jpeg) to worker 0; 1 and 3 (b.png, dog/x.png) to worker 1.
  EXPECT_EQ(labels[0], (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(shapes[0], (std::vector<Shape>{Shape{8, 8, 3}, Shape{6, 10, 3}}));
  EXPECT_EQ(labels[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(shapes[1], (std::vector<Shape>{Shape{4, 5, 3}, Shape{3, 7, 3}}));
  EXPECT_THROW(auto_shard(d, 5, 0, AutoShardPolicy::file), InvalidArgument);
  EXPECT_THROW(d.node()->input()->with_files({"/elsewhere/z.png"}), InvalidArgument);
}

TEST(ImageFolder, PipelineDecodesResizesCropsAndNormalisesInParallel) {
  const fs::path root = make_pets("folder_pipeline");
  const Dataset d = Dataset::from_image_folder(root.string())
                        .map(decode_image_fn("image", 3), {.num_parallel_calls = kAutotune})
                        .map(resize_image_fn(9, 9), {.num_parallel_calls = 2})
                        .map(center_crop_fn(7, 7))
                        .map(normalize({0.5f}, {0.25f}))
                        .batch(3);
  Iterator it = d.iterator();
  auto batch = it.next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("image").shape(), (Shape{3, 7, 7, 3}));
  EXPECT_EQ(batch->at("image").dtype(), DType::f32);
  EXPECT_EQ(batch->at("label").to_ints(), (std::vector<int32_t>{0, 0, 0}));
  batch = it.next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("label").to_ints(), (std::vector<int32_t>{1}));
  EXPECT_FALSE(it.next());
}

TEST(ImageHelpers, ResizeImageIsTheBilinearKernel) {
  const Tensor image = test_image(5, 7, 4);
  const Tensor resized = resize_image(image, 3, 11);
  EXPECT_EQ(resized.shape(), (Shape{3, 11, 3}));
  EXPECT_EQ(resized.dtype(), DType::u8);
  EXPECT_EQ(resized.to_floats(), kernels::resize_bilinear(image, 3, 11).to_floats());
  EXPECT_EQ(resize_image(image.to(DType::f32), 5, 7).to_floats(), image.to_floats());  // identity
  EXPECT_THROW(resize_image(Tensor::zeros(Shape{5, 7}), 2, 2), ShapeError);
  EXPECT_THROW(resize_image(image, 0, 2), InvalidArgument);
  EXPECT_THROW(resize_image_fn(2, 0), InvalidArgument);
}

TEST(ImageHelpers, CenterCropTakesTheMiddle) {
  // Pixel (y, x) holds 10 y + x in both channels.
  Tensor image = Tensor::empty(Shape{6, 7, 2}, DType::i32);
  for (int64_t y = 0; y < 6; ++y) {
    for (int64_t x = 0; x < 7; ++x) {
      for (int64_t c = 0; c < 2; ++c)
        image.data<int32_t>()[(y * 7 + x) * 2 + c] = static_cast<int32_t>(10 * y + x);
    }
  }
  // (6 - 3) / 2 = 1 rows and (7 - 4) / 2 = 1 columns are cut before the window.
  const Tensor crop = center_crop(image, 3, 4);
  ASSERT_EQ(crop.shape(), (Shape{3, 4, 2}));
  for (int64_t y = 0; y < 3; ++y) {
    for (int64_t x = 0; x < 4; ++x)
      EXPECT_EQ(crop.data<int32_t>()[(y * 4 + x) * 2 + 1], 10 * (y + 1) + (x + 1)) << y << "," << x;
  }
  EXPECT_EQ(center_crop(image, 6, 7).to_ints(), image.to_ints());
  EXPECT_EQ(center_crop(image.to(DType::f32), 1, 1).to_floats(), (std::vector<float>{23, 23}));
  const std::string message = error_of<ShapeError>([&] { center_crop(image, 7, 2); });
  EXPECT_NE(message.find("a 7x2 crop does not fit the image"), std::string::npos) << message;
  EXPECT_THROW(center_crop(image, 0, 2), InvalidArgument);
  EXPECT_THROW(center_crop(Tensor::zeros(Shape{6, 7}), 2, 2), ShapeError);
}

TEST(ImageHelpers, NormalizeImagePerChannelOrOneValue) {
  const Tensor image =
      Tensor::from_floats(Shape{1, 2, 3}, std::vector<float>{0, 51, 102, 153, 204, 255}, DType::u8);
  const std::vector<float> per_channel =
      normalize_image(image, 1.0f / 255.0f, {0.1f, 0.2f, 0.3f}, {0.5f}).to_floats();
  const std::vector<float> x = image.to_floats();
  const double mean[3] = {0.1, 0.2, 0.3};
  ASSERT_EQ(per_channel.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(per_channel[i], (x[i] / 255.0 - mean[i % 3]) / 0.5, 1e-6) << i;
  const Tensor f = normalize_image(image.to(DType::f32), 2.0f, {1.0f}, {2.0f, 4.0f, 8.0f});
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.shape(), image.shape());
  EXPECT_FLOAT_EQ(f.to_floats()[5], (255.0f * 2 - 1) / 8);
  EXPECT_THROW(normalize_image(image, 1, {0, 0}, {1}), ShapeError);
  EXPECT_THROW(normalize_image(image, 1, {}, {1}), InvalidArgument);
  EXPECT_THROW(normalize_image(image, 1, {0}, {0}), InvalidArgument);
  // The map function names the feature.
  Iterator it = Dataset::from_elements({Element{{"pixels", image}}})
                    .map(normalize({0, 0}, {1, 1}, "pixels"))
                    .iterator();
  const std::string message = error_of<ShapeError>([&] { it.next(); });
  EXPECT_NE(message.find("feature 'pixels'"), std::string::npos) << message;
}

TEST(ImageHelpers, ScaledJpegDecodingPicksTheSmallestLargeEnoughScale) {
  const Tensor image = smooth_image(48, 64);
  const Tensor jpeg = encode_jpeg(image, 95);
  auto shape_for = [&](int64_t h, int64_t w) {
    return decode_image(jpeg, {.min_height = h, .min_width = w}).shape();
  };
  EXPECT_EQ(shape_for(0, 0), (Shape{48, 64, 3}));
  EXPECT_EQ(shape_for(20, 20), (Shape{24, 32, 3}));    // 1/2; 1/4 would be 12x16
  EXPECT_EQ(shape_for(10, 10), (Shape{12, 16, 3}));    // 1/4
  EXPECT_EQ(shape_for(0, 8), (Shape{6, 8, 3}));        // 1/8, width only
  EXPECT_EQ(shape_for(25, 1), (Shape{48, 64, 3}));     // 1/2 would be 24 rows: full size
  EXPECT_EQ(shape_for(100, 100), (Shape{48, 64, 3}));  // larger than the image
  EXPECT_EQ(decode_image(jpeg, {.channels = 1, .min_height = 6, .min_width = 8}).shape(),
            (Shape{6, 8, 1}));
  // Odd sizes round up: 45 x 61 at 1/4 is 12 x 16.
  EXPECT_EQ(
      decode_image(encode_jpeg(smooth_image(45, 61)), {.min_height = 12, .min_width = 16}).shape(),
      (Shape{12, 16, 3}));
  // Close to decoding in full and resizing.
  const std::vector<float> half =
      decode_image(jpeg, {.min_height = 24, .min_width = 32}).to_floats();
  const std::vector<float> resized =
      resize_image(decode_image(jpeg).to(DType::f32), 24, 32).to_floats();
  double sum = 0;
  for (size_t i = 0; i < half.size(); ++i) sum += std::abs(half[i] - resized[i]);
  EXPECT_LT(sum / static_cast<double>(half.size()), 3.0);
  // PNGs decode in full.
  EXPECT_EQ(decode_image(encode_png(image), {.min_height = 6, .min_width = 8}).shape(),
            (Shape{48, 64, 3}));
  EXPECT_THROW(decode_image(jpeg, {.min_height = -1}), InvalidArgument);
  EXPECT_THROW(decode_image(jpeg, {.channels = 2}), InvalidArgument);
  Iterator it = Dataset::from_elements({Element{{"image", jpeg}}})
                    .map(decode_image_fn("image", {.min_height = 12, .min_width = 16}))
                    .iterator();
  EXPECT_EQ(it.next()->at("image").shape(), (Shape{12, 16, 3}));
}

// Big-endian u16/u32 writes into a header.
void put_be(std::string& s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s[at + i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xFF);
}

TEST(ImageHelpers, HeadersClaimingHugeImagesAreRefusedBeforeAllocating) {
  // PNG: IHDR (at byte 8: length, "IHDR", width, height, ..., CRC) says 10000 x 10000.
  std::string png = tensor_bytes(encode_png(test_image(4, 4, 0)));
  ASSERT_EQ(png.substr(12, 4), "IHDR");
  put_be(png, 16, 10000, 4);
  put_be(png, 20, 10000, 4);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  put_be(png, 29, static_cast<uint32_t>(crc), 4);
  std::string message = error_of<IoError>([&] { decode_image(bytes_tensor(png)); });
  EXPECT_NE(message.find("PNG image of 10000x10000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("kMaxImagePixels"), std::string::npos) << message;
  // JPEG: the baseline frame header (FF C0, length, precision, height, width) says 9000 x 9000.
  std::string jpeg = tensor_bytes(encode_jpeg(test_image(8, 8, 0)));
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  put_be(jpeg, sof + 5, 9000, 2);
  put_be(jpeg, sof + 7, 9000, 2);
  message = error_of<IoError>([&] { decode_image(bytes_tensor(jpeg)); });
  EXPECT_NE(message.find("JPEG image of 9000x9000 pixels"), std::string::npos) << message;
}

}  // namespace
}  // namespace tandem::data
