#pragma once
// A folder of images as a labelled dataset, in the convention of Keras'
// image_dataset_from_directory: root/<class>/<image file>, one sub-folder per
// class, labels numbering the classes in sorted (or the given) order. Class
// folders are not searched recursively; names starting with '.' (hidden
// folders and files, macOS "._" resource forks) are skipped. The listing is a
// pure function of the folder's contents: classes in order, then each
// class's files sorted by path (bytewise).

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Image files larger than this (bytes) are refused before they are read.
inline constexpr int64_t kMaxImageFileBytes = int64_t{1} << 30;

struct ImageFolderIndex {
  std::vector<std::string> class_names;  // label i is class_names[i]
  std::vector<std::string> files;        // root/<class>/<file>, class by class
  std::vector<int32_t> labels;           // files[i]'s label
  // With known_classes: those with no folder here (their labels never occur).
  std::vector<std::string> missing_classes;
};

// Lists root as from_image_folder reads it. Throws IoError naming the path
// for a missing or unlistable root, a root without class folders, or a
// class folder without images; InvalidArgument for a class name that is not
// a sub-folder (or is repeated, empty or a path), for a sub-folder that is
// not one of known_classes, for both lists given, and for empty extensions.
ImageFolderIndex index_image_folder(const std::string& root,
                                    const ImageFolderOptions& options = {});

// The class names in label order (index_image_folder(...).class_names)
// from the sub-folders alone, without listing their files (which reading
// the folder then does once): the same errors but those about the files
// (a class folder without images) and the extensions.
std::vector<std::string> image_folder_class_names(const std::string& root,
                                                  const ImageFolderOptions& options = {});

}  // namespace tandem::data
