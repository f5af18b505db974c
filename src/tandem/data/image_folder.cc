// Dataset::from_image_folder: the folder is listed once, when the dataset is
// built; each next() reads one file's bytes (decoding is the caller's map).
#include "tandem/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_map>

#include "tandem/base/error.h"
#include "tandem/base/utf8.h"
#include "tandem/data/batching.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// The entries of a folder, or IoError naming it.
std::vector<fs::directory_entry> list_folder(const fs::path& folder) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  fs::directory_iterator it(folder, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) entries.push_back(*it);
  if (ec) TANDEM_THROW(IoError, "cannot list folder '", folder.string(), "': ", ec.message());
  return entries;
}

std::vector<std::string> normalized_extensions(const std::vector<std::string>& extensions) {
  if (extensions.empty())
    TANDEM_THROW(InvalidArgument, "image folder: the list of image extensions is empty");
  std::vector<std::string> out;
  for (const std::string& e : extensions) {
    if (e.empty() || e == ".")
      TANDEM_THROW(InvalidArgument, "image folder: empty image extension in the list");
    out.push_back(lower(e[0] == '.' ? e : "." + e));
  }
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Sub-folders of root that can be classes, sorted by name.
std::vector<std::string> class_folders(const fs::path& root) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : list_folder(root)) {
    std::error_code ec;
    if (!hidden(entry.path()) && entry.is_directory(ec)) {
      const std::string name = entry.path().filename().string();
      // Class names are recorded as JSON in checkpoints and summaries.
      if (!is_utf8(name)) {
        TANDEM_THROW(InvalidArgument, "image folder '", root.string(), "': class folder '",
                     escape_invalid_utf8(name),
                     "' has a name that is not UTF-8, which a run's records (JSON) need: "
                     "rename it");
      }
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The image files of one class folder, sorted by path.
std::vector<std::string> class_files(const fs::path& folder,
                                     const std::vector<std::string>& extensions) {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : list_folder(folder)) {
    std::error_code ec;
    if (hidden(entry.path()) || !entry.is_regular_file(ec)) continue;
    const std::string extension = lower(entry.path().extension().string());
    if (std::find(extensions.begin(), extensions.end(), extension) != extensions.end())
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The bytes of one file as a 1-D u8 tensor; IoError naming it.
Tensor read_image_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) TANDEM_THROW(IoError, "cannot open image file '", path, "': ", std::strerror(errno));
  const std::streamoff size = in.tellg();
  if (size < 0) TANDEM_THROW(IoError, "cannot read image file '", path, "'");
  if (size > kMaxImageFileBytes) {
    TANDEM_THROW(IoError, "image file '", path, "' has ", size, " bytes, more than the ",
                 kMaxImageFileBytes, " an image file may have");
  }
  Tensor bytes = Tensor::empty(Shape{static_cast<int64_t>(size)}, DType::u8);
  in.seekg(0);
  in.read(static_cast<char*>(bytes.raw_data()), size);
  if (in.gcount() != size) {
    TANDEM_THROW(IoError, "cannot read image file '", path, "': got ", in.gcount(), " of ", size,
                 " bytes");
  }
  return bytes;
}

// Appends a class folder's images with their label; IoError for a folder
// without images.
void add_class(const fs::path& folder, int32_t label, const std::vector<std::string>& extensions,
               ImageFolderIndex& index) {
  std::vector<std::string> files = class_files(folder, extensions);
  if (files.empty()) {
    TANDEM_THROW(IoError, "class folder '", folder.string(), "' has no images (",
                 joined(extensions), ")");
  }
  for (std::string& f : files) {
    index.files.push_back(std::move(f));
    index.labels.push_back(label);
  }
}

// A folder read for a model that knows `options.known_classes`: labels are
// indices into that list, every sub-folder must be one of them, and known
// classes without a folder are listed as missing. Without this, a
// validation folder lacking one class would shift every later label.
ImageFolderIndex index_known_classes(const fs::path& root, const std::vector<std::string>& folders,
                                     const std::vector<std::string>& extensions,
                                     const ImageFolderOptions& options) {
  if (!options.class_names.empty()) {
    TANDEM_THROW(InvalidArgument,
                 "image folder: class_names and known_classes cannot both be given");
  }
  const std::vector<std::string>& known = options.known_classes;
  std::vector<std::string> unknown;
  for (const std::string& f : folders) {
    if (std::find(known.begin(), known.end(), f) == known.end()) unknown.push_back(f);
  }
  if (!unknown.empty()) {
    TANDEM_THROW(InvalidArgument, "image folder '", root.string(), "' has class folder(s) ",
                 joined(unknown), " that the model does not know (its ", known.size(),
                 " classes: ", joined(known), ")");
  }
  ImageFolderIndex index;
  index.class_names = known;
  for (size_t label = 0; label < known.size(); ++label) {
    if (std::binary_search(folders.begin(), folders.end(), known[label])) {
      add_class(root / known[label], static_cast<int32_t>(label), extensions, index);
    } else {
      index.missing_classes.push_back(known[label]);
    }
  }
  if (index.files.empty()) {
    TANDEM_THROW(IoError, "image folder '", root.string(), "' has none of the model's classes (",
                 joined(known), ")");
  }
  return index;
}

class ImageFolderNode : public detail::Node {
 public:
  // label_of maps every file of the whole folder to its label, so that
  // with_files can relabel any subset.
  ImageFolderNode(std::vector<std::string> files, std::vector<int32_t> labels, size_t classes,
                  std::shared_ptr<const std::unordered_map<std::string, int32_t>> label_of,
                  std::optional<uint64_t> shuffle_seed, bool with_origin)
      : files_(std::move(files)),
        labels_(std::move(labels)),
        classes_(classes),
        label_of_(std::move(label_of)),
        shuffle_seed_(shuffle_seed),
        with_origin_(with_origin) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      ImageFolderNode* node;
      std::vector<int64_t> order;  // empty: file order
      size_t next_index = 0;
      std::optional<Element> next() override {
        if (next_index >= node->files_.size()) return std::nullopt;
        const auto start = detail::Clock::now();
        const size_t i = order.empty() ? next_index : static_cast<size_t>(order[next_index]);
        ++next_index;
        Tensor label = Tensor::empty(Shape{}, DType::i32);
        label.data<int32_t>()[0] = node->labels_[i];
        Element e{{"image", read_image_file(node->files_[i])}, {"label", label}};
        if (node->with_origin_) e.set("origin", bytes_tensor(node->files_[i]));
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    const int64_t pass = next_pass();
    if (shuffle_seed_) {
      it->order = epoch_permutation(static_cast<int64_t>(files_.size()), *shuffle_seed_, pass);
    }
    return it;
  }
  std::string label() const override {
    return "image_folder(" + std::to_string(files_.size()) + " files, " + std::to_string(classes_) +
           " classes)";
  }
  std::vector<std::string> files() const override { return files_; }
  int64_t cardinality() const override { return static_cast<int64_t>(files_.size()); }
  std::shared_ptr<detail::Node> with_files(std::vector<std::string> files) const override {
    std::vector<int32_t> labels;
    labels.reserve(files.size());
    for (const std::string& f : files) {
      const auto it = label_of_->find(f);
      if (it == label_of_->end()) {
        TANDEM_THROW(InvalidArgument, "image folder: '", f,
                     "' is not one of the folder's image files");
      }
      labels.push_back(it->second);
    }
    return std::make_shared<ImageFolderNode>(std::move(files), std::move(labels), classes_,
                                             label_of_, shuffle_seed_, with_origin_);
  }

 private:
  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
  size_t classes_;
  std::shared_ptr<const std::unordered_map<std::string, int32_t>> label_of_;
  std::optional<uint64_t> shuffle_seed_;
  bool with_origin_;
};

// root's class sub-folders, sorted; IoError for a root that is missing,
// unreadable or not a folder.
std::vector<std::string> root_class_folders(const std::string& root) {
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (ec && status.type() != fs::file_type::not_found)
    TANDEM_THROW(IoError, "cannot access image folder '", root, "': ", ec.message());
  if (!fs::exists(status)) TANDEM_THROW(IoError, "image folder '", root, "' does not exist");
  if (!fs::is_directory(status)) TANDEM_THROW(IoError, "image folder '", root, "' is not a folder");
  return class_folders(root);
}

// The classes in label order from `folders` (root's) and options.class_names.
std::vector<std::string> chosen_classes(const std::string& root,
                                        const std::vector<std::string>& folders,
                                        const ImageFolderOptions& options) {
  if (options.class_names.empty()) {
    if (folders.empty()) {
      TANDEM_THROW(IoError, "image folder '", root, "' has no class sub-folders (expected ", root,
                   "/<class>/<image>)");
    }
    return folders;
  }
  std::set<std::string> seen;
  for (const std::string& name : options.class_names) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      TANDEM_THROW(InvalidArgument, "image folder: class name '", name,
                   "' is not a sub-folder name");
    }
    if (!seen.insert(name).second)
      TANDEM_THROW(InvalidArgument, "image folder: class name '", name, "' is given twice");
    if (!std::binary_search(folders.begin(), folders.end(), name)) {
      TANDEM_THROW(InvalidArgument, "image folder: class '", name, "' has no folder '",
                   (fs::path(root) / name).string(), "' (the sub-folders are: ",
                   folders.empty() ? std::string("none") : joined(folders), ")");
    }
  }
  return options.class_names;
}

}  // namespace

ImageFolderIndex index_image_folder(const std::string& root, const ImageFolderOptions& options) {
  const std::vector<std::string> extensions = normalized_extensions(options.extensions);
  const std::vector<std::string> folders = root_class_folders(root);
  if (!options.known_classes.empty())
    return index_known_classes(root, folders, extensions, options);
  ImageFolderIndex index;
  index.class_names = chosen_classes(root, folders, options);
  for (size_t label = 0; label < index.class_names.size(); ++label)
    add_class(fs::path(root) / index.class_names[label], static_cast<int32_t>(label), extensions,
              index);
  return index;
}

std::vector<std::string> image_folder_class_names(const std::string& root,
                                                  const ImageFolderOptions& options) {
  if (!options.known_classes.empty()) return index_image_folder(root, options).class_names;
  return chosen_classes(root, root_class_folders(root), options);
}

Dataset Dataset::from_image_folder(const std::string& root, const ImageFolderOptions& options) {
  ImageFolderIndex index = index_image_folder(root, options);
  auto label_of = std::make_shared<std::unordered_map<std::string, int32_t>>();
  for (size_t i = 0; i < index.files.size(); ++i)
    label_of->emplace(index.files[i], index.labels[i]);
  return Dataset(std::make_shared<ImageFolderNode>(std::move(index.files), std::move(index.labels),
                                                   index.class_names.size(), std::move(label_of),
                                                   options.shuffle_seed, options.with_origin));
}

}  // namespace tandem::data
