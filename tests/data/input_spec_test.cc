// Data specifications: every example in docs/training.md parses and builds
// a pipeline over files written here; mistakes name the file, line and key.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/test_data.h"
#include "support/test_files.h"
#include "tandem/base/error.h"
#include "tandem/data/example.h"
#include "tandem/data/idx.h"
#include "tandem/data/image.h"
#include "tandem/data/input_spec.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::string fresh(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / ("input_spec_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// The files the documentation's examples name.
void write_example_files(const std::string& dir) {
  const LabeledImages images{testing::fashion().train.images.slice(0, 20),
                             testing::fashion().train.labels.slice(0, 20)};
  testing::write_jpeg_tfrecords(dir, images, {12, 8});  // train-0, train-1
  testing::write_regression_csv(dir + "/train.csv", 30, 3, 1);
  std::vector<std::string> text;
  for (const std::string& s : {std::string("in the beginning"), std::string("and the earth")}) {
    Feature tokens{.kind = Feature::Kind::bytes_list};
    tokens.bytes = {s};
    Feature targets{.kind = Feature::Kind::int64_list};
    for (char c : s) targets.int64s.push_back(static_cast<unsigned char>(c));
    text.push_back(encode_example({{"tokens", tokens}, {"targets", targets}}));
  }
  write_tfrecord(dir + "/text-0.tfrecord", text);
  write_idx(dir + "/train-images-idx3-ubyte.gz", Tensor::zeros(Shape{6, 28, 28}).to(DType::u8));
  write_idx(dir + "/train-labels-idx1-ubyte.gz", Tensor::zeros(Shape{6}).to(DType::u8));
  for (const char* c : {"cat", "dog"}) {
    fs::create_directories(fs::path(dir) / "images" / c);
    for (int i = 0; i < 3; ++i) {
      const std::string bytes =
          tensor_bytes(encode_png(Tensor::full(Shape{70, 80, 3}, 100.0f).to(DType::u8)));
      std::ofstream(fs::path(dir) / "images" / c / (std::to_string(i) + ".png"), std::ios::binary)
          .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
  }
}

TEST(InputSpec, EveryExampleInTheTrainingDocsBuildsItsPipeline) {
  std::ifstream docs(fs::path(TANDEM_SOURCE_DIR) / "docs" / "training.md");
  const std::string text(std::istreambuf_iterator<char>(docs), {});
  const std::regex block("```toml\n([\\s\\S]*?)```");
  const std::string dir = fresh("docs");
  write_example_files(dir);
  int specs = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), block);
       it != std::sregex_iterator(); ++it) {
    const std::string toml = (*it)[1].str();
    if (toml.find("format = ") == std::string::npos) continue;
    ++specs;
    SCOPED_TRACE(toml);
    const InputSpec spec = parse_input_spec(toml, dir + "/spec.toml");
    Iterator examples = make_input(spec, 1).iterator();
    const std::optional<Element> first = examples.next();
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(first->has(spec.input)) << first->describe();
    EXPECT_TRUE(first->has(spec.label)) << first->describe();
    if (spec.format == "image_folder") {
      EXPECT_EQ(first->at("image").shape(), (Shape{56, 56, 3}));  // resized, then cropped
      EXPECT_EQ(first->at("image").dtype(), DType::f32);
    }
    if (spec.needs_padding()) {
      // Variable-length features batch padded, with their padding value.
      Iterator batches = make_input(spec, 1).padded_batch(2, spec.padding()).iterator();
      const Element batch = *batches.next();
      EXPECT_EQ(batch.at("tokens").shape(), (Shape{2, 16}));
      EXPECT_EQ(batch.at("tokens").dtype(), DType::i32);
      EXPECT_EQ(batch.at("targets").to_ints()[16 + 13], -100);  // "and the earth" is 13 bytes
    }
  }
  EXPECT_EQ(specs, 5);
}

// Two features may read one Example key with their own type, shape or
// dtype (the parse was keyed by the source, and the last one's won).
TEST(InputSpec, TwoFeaturesReadOneSourceEachAsItsSpecSays) {
  const std::string dir = fresh("shared_source");
  write_example_files(dir);
  const InputSpec spec = parse_input_spec(
      "format = \"tfrecord\"\nfiles = [\"text-0.tfrecord\"]\nshuffle = 0\ninput = \"raw\"\nlabel = "
      "\"targets\"\n[features.raw]\ntype = \"bytes\"\nsource = \"tokens\"\ndecode = \"raw\"\n"
      "dtype = \"i32\"\n[features.text]\ntype = \"bytes\"\nsource = \"tokens\"\ndecode = "
      "\"raw\"\n[features.targets]\ntype = \"int64\"\nvariable_length = true\n"
      "[features.targets_f]\ntype = \"int64\"\nsource = \"targets\"\nvariable_length = true\n"
      "dtype = \"f32\"\n",
      dir + "/spec.toml");
  Iterator examples = make_input(spec, 0).iterator();
  const Element first = *examples.next();
  EXPECT_EQ(first.at("raw").dtype(), DType::i32);
  EXPECT_EQ(first.at("text").dtype(), DType::u8);
  EXPECT_EQ(first.at("targets").dtype(), DType::i32);
  EXPECT_EQ(first.at("targets_f").dtype(), DType::f32);
  EXPECT_EQ(first.at("targets_f").to_floats()[0], static_cast<float>('i'));
  EXPECT_EQ(first.at("raw").to_ints()[0], 'i');
}

// A spreadsheet export: a byte-order mark and spaces in the header, a name
// column and an empty comment no feature reads, old Mac line ends. The
// unread columns stopped training ("'alice' is not a number"), the header's
// names did not match, and a lone \r joined every line into one.
TEST(InputSpec, CsvExportsFromSpreadsheetsReadAsTheirColumnsSay) {
  const std::string dir = fresh("csv_exports");
  std::ofstream(dir + "/t.csv", std::ios::binary)
      << "\xEF\xBB\xBFid, name , x0, x1 ,y,notes\r1,alice,0.5,1.5,2,\r2,bob,1,2,3,fine\r";
  const InputSpec spec = parse_input_spec(
      "format = \"csv\"\nfiles = [\"t.csv\"]\nshuffle = 0\ninput = \"x\"\nlabel = \"y\"\n"
      "[features.x]\ncolumns = [\"x0\", \"x1\"]\n[features.y]\ntype = \"int\"\n",
      dir + "/spec.toml");
  Iterator examples = make_input(spec, 0).iterator();
  const Element first = *examples.next();
  EXPECT_EQ(first.at("x").to_floats(), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(first.at("y").to_ints(), std::vector<int32_t>{2});
  const Element second = *examples.next();
  EXPECT_EQ(second.at("y").to_ints(), std::vector<int32_t>{3});
  EXPECT_FALSE(examples.next().has_value());
  // A column the file lacks is named with those it has.
  try {
    make_input(parse_input_spec("format = \"csv\"\nfiles = [\"t.csv\"]\ninput = \"x\"\n"
                                "label = \"y\"\n[features.x]\ncolumns = [\"x2\"]\n[features.y]\n",
                                dir + "/spec.toml"),
               0);
    ADD_FAILURE() << "read a column the file lacks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("does not have (it has 'id', 'name', 'x0'"),
              std::string::npos)
        << e.what();
  }
}

// A spec's files: each a regular file, named once, its folder not a glob.
TEST(InputSpec, FilesAreRegularFilesNamedOnceFromTheSpecsOwnFolder) {
  const std::string root = fresh("files");
  const auto record = [](const std::string& path, int64_t value) {
    Feature x{.kind = Feature::Kind::int64_list};
    x.int64s = {value};
    write_tfrecord(path, {encode_example({{"x", x}, {"y", x}})});
  };
  fs::create_directories(root + "/g[1]/sub");
  fs::create_directories(root + "/g1");
  record(root + "/g[1]/own.tfrecord", 1);
  record(root + "/g1/other.tfrecord", 9);
  const std::string features =
      "label = \"y\"\n[features.x]\ntype = \"int64\"\n[features.y]\ntype = \"int64\"\n";
  const auto spec = [&](const std::string& files) {
    return parse_input_spec(
        "format = \"tfrecord\"\nfiles = " + files + "\ninput = \"x\"\n" + features,
        root + "/g[1]/spec.toml");
  };
  // The folder "g[1]" is not a pattern: its own file, not g1's.
  const InputSpec own = spec("[\"*.tfrecord\"]");
  ASSERT_EQ(own.files.size(), 1u);
  EXPECT_EQ(*make_input(own, 0).iterator().next()->at("x").to_ints().begin(), 1);
  const auto refused = [&](const std::string& files, const std::string& needle) {
    try {
      spec(files);
      ADD_FAILURE() << files << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("[\"sub\"]", "is a folder, not a file");
  refused("[\"*\"]", "is a folder, not a file");  // the glob matches sub/
  refused("[\"own.tfrecord\", \"*.tfrecord\"]", "is named twice");
}

std::string error_of(const std::string& toml, const std::string& dir) {
  try {
    const InputSpec spec = parse_input_spec(toml, dir + "/bad.toml");
    Iterator it = make_input(spec, 0).iterator();
    while (it.next()) {
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(InputSpec, MistakesNameTheFileTheLineAndTheKey) {
  const std::string dir = fresh("errors");
  write_example_files(dir);
  const std::string csv =
      "format = \"csv\"\nfiles = [\"train.csv\"]\ninput = \"x\"\nlabel = \"y\"\n"
      "[features.x]\ncolumns = [\"x0\", \"x1\"]\n[features.y]\ncolumns = [\"y\"]\n";
  EXPECT_EQ(error_of(csv, dir), "no error");
  const auto expect_error = [&](const std::string& toml, const std::string& needle) {
    const std::string e = error_of(toml, dir);
    EXPECT_NE(e.find(needle), std::string::npos) << "got: " << e;
  };
  expect_error("shufle = 3\n" + csv, "bad.toml:1: unknown key 'shufle'");
  expect_error(csv + "resise = [2, 2]\n", "bad.toml:9: features.y: unknown key 'resise'");
  expect_error(csv + "[features.z]\ncolumns = [\"x0\"]\ndecode = \"image\"\n", "features.z");
  expect_error("format = \"parquet\"\n", "bad.toml:1: 'format' must be tfrecord, csv, idx");
  expect_error("format = \"csv\"\nfiles = [\"none.csv\"]\n", "bad.toml:2: no file");
  expect_error("format = \"tfrecord\"\nfiles = [\"nothing-*.tfrecord\"]\n", "no file matches");
  // A name the OS refuses is a missing file with the OS's reason, not an
  // exception from std::filesystem (found by the input_spec fuzzer).
  const std::string long_name(300, 'K');
  expect_error("format = \"csv\"\nfiles = [\"" + long_name + ".csv\"]\n", "bad.toml:2: no file");
  expect_error("format = \"idx\"\nimages = \"" + long_name + "-idx3-ubyte.gz\"\nlabels = \"x\"\n",
               "File name too long");
  expect_error("format = \"csv\"\nfiles = 3\n", "bad.toml:2: 'files' must be a string");
  // Settings that would do nothing (a CSV feature's source read another
  // column than it named) are refused.
  expect_error(csv + "source = \"x1\"\n", "bad.toml:9: features.y: 'source' applies to tfrecord");
  expect_error("compression = \"gzip\"\n" + csv, "'compression' applies to tfrecord data");
  expect_error(
      "format = \"idx\"\nimages = \"train-images-idx3-ubyte.gz\"\nlabels = "
      "\"train-labels-idx1-ubyte.gz\"\n[features.image]\nchannels = 3\n",
      "idx images are gray");
  expect_error(
      "format = \"idx\"\nimages = \"train-images-idx3-ubyte.gz\"\nlabels = "
      "\"train-labels-idx1-ubyte.gz\"\n[features.image]\nscale = 0.0\n",
      "'scale' must be positive");
  expect_error(
      "format = \"csv\"\nfiles = [\"train.csv\"]\ninput = \"x\"\nlabel = \"y\"\n"
      "[features.x]\ncolumns = [\"x9\"]\n[features.y]\ncolumns = [\"y\"]\n",
      "reads column 'x9'");
  expect_error(
      "format = \"tfrecord\"\nfiles = [\"train-*.tfrecord\"]\n[features.image]\n"
      "type = \"bytes\"\n[features.label]\ntype = \"int64\"\n",
      "bad.toml:3: features.image: bytes features need decode");
  expect_error(
      "format = \"tfrecord\"\nfiles = [\"train-*.tfrecord\"]\n[features.image]\n"
      "type = \"bytes\"\ndecode = \"image\"\nchannels = 2\n[features.label]\n"
      "type = \"int64\"\n",
      "bad.toml:6: features.image: 'channels' must be 1 or 3");
  expect_error(
      "format = \"tfrecord\"\nfiles = [\"train-*.tfrecord\"]\n[features.label]\n"
      "type = \"int64\"\n",
      "the input feature 'image' is not among");
  expect_error("format = \"idx\"\nimages = \"train-images-idx3-ubyte.gz\"\n", "'labels'");
  expect_error(
      "format = \"tfrecord\"\nfiles = [\"train-*.tfrecord\"]\n[features.label]\n"
      "type = \"int64\"\ndtype = \"u8\"\n",
      "bad.toml:5: features.label: an int64 feature's 'dtype' must be i32 or f32");
  expect_error("format = \"csv\" = 3\n", "bad.toml:1:");  // not TOML
  expect_error("format = \"csv\"\n" + testing::repeated("\"a\" . ", 100000) + "b = 1\n",
               "bad.toml:2: a dotted key of more than 256 parts");
  // An undecodable image fails where it is read, naming the problem.
  const std::string junk = dir + "/junk.tfrecord";
  Feature bytes{.kind = Feature::Kind::bytes_list};
  bytes.bytes = {"not an image"};
  Feature label{.kind = Feature::Kind::int64_list};
  label.int64s = {0};
  // The error names the file and record (the second of the file)...
  Feature good{.kind = Feature::Kind::bytes_list};
  good.bytes = {tensor_bytes(encode_png(Tensor::full(Shape{4, 4, 3}, 9.0f).to(DType::u8)))};
  write_tfrecord(junk, {encode_example({{"image", good}, {"label", label}}),
                        encode_example({{"image", bytes}, {"label", label}})});
  expect_error(
      "format = \"tfrecord\"\nfiles = [\"junk.tfrecord\"]\n[features.image]\ntype = "
      "\"bytes\"\ndecode = \"image\"\n[features.label]\ntype = \"int64\"\n",
      "'" + junk + " record 1': decode_image: 12 bytes are neither JPEG nor PNG");
  // ... and an image folder's the file.
  const fs::path bad_png = fs::path(dir) / "images" / "dog" / "1.png";
  std::ofstream(bad_png, std::ios::binary | std::ios::trunc) << "not a png";
  expect_error("format = \"image_folder\"\nroot = \"images\"\nshuffle = 0\n",
               "'" + bad_png.string() + "': decode_image: 9 bytes are neither JPEG nor PNG");
  EXPECT_THROW(read_input_spec(dir + "/missing.toml"), IoError);
}

TEST(InputSpec, AFolderIsAnImageFolderShuffledEachEpoch) {
  const std::string dir = fresh("folder");
  write_example_files(dir);
  const InputSpec spec = read_input_spec(dir + "/images");
  EXPECT_EQ(spec.format, "image_folder");
  const auto expect_shuffled = [](const Dataset& d) {
    EXPECT_EQ(d.cardinality(), 6);
    const auto labels = [&](int64_t pass) {
      std::vector<int32_t> out;
      Iterator it = d.iterator(pass);
      while (auto e = it.next()) out.push_back(e->at("label").to_ints()[0]);
      return out;
    };
    EXPECT_EQ(labels(0).size(), 6u);
    EXPECT_EQ(labels(0), labels(0));  // a pass is a function of its number
    bool differs = false, unsorted = false;
    for (int64_t pass = 0; pass < 6; ++pass) {
      const std::vector<int32_t> l = labels(pass);
      differs = differs || l != labels(0);
      unsorted = unsorted || !std::is_sorted(l.begin(), l.end());
    }
    EXPECT_TRUE(differs);
    EXPECT_TRUE(unsorted);
  };
  expect_shuffled(make_input(spec, 3));
  // Cached, the shuffle follows the cache and takes the whole folder (it
  // took a buffer of `shuffle` = 1 and trained class by class).
  expect_shuffled(
      make_input(parse_input_spec("format = \"image_folder\"\nroot = \"images\"\ncache = true\n",
                                  dir + "/spec.toml"),
                 3));
  // A specification of the folder shuffles it too unless it says
  // shuffle = 0 (its files are listed class by class).
  const InputSpec described =
      parse_input_spec("format = \"image_folder\"\nroot = \"images\"\n", dir + "/spec.toml");
  EXPECT_GT(described.shuffle, 0);
  EXPECT_EQ(parse_input_spec("format = \"image_folder\"\nroot = \"images\"\nshuffle = 0\n",
                             dir + "/spec.toml")
                .shuffle,
            0);
}

}  // namespace
}  // namespace tandem::data
