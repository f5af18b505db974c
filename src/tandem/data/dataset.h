#pragma once
// Dataset: tandem's tf.data. A Dataset is an immutable, lazily evaluated
// description of a pipeline (a chain of nodes: a source, then
// transformations); iterator() starts one pass over it. Copies are cheap and
// share the pipeline.
//
// Guarantees:
//  - Order: every transformation keeps its input's order unless asked not to
//    (map/interleave with deterministic = false).
//  - Determinism: the same seeds and configuration give the same elements in
//    the same order, whatever the parallelism and thread timing.
//  - Errors: an exception in a user function (map, filter, interleave) or a
//    bad input file reaches the consumer from next() at the position of the
//    element it concerns; background threads stop; nothing hangs.
//  - Reshuffling: a shuffle with reshuffle_each_iteration draws a new order on
//    each pass (each iterator() or each repeat), from (seed, pass).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/data/stats.h"

namespace tandem::data {

// For num_parallel_calls, prefetch buffer sizes and interleave parallelism:
// sized at run time from measured producer and consumer rates.
inline constexpr int kAutotune = -1;

// Dataset::cardinality() of a dataset without end (repeat()) and of one whose
// size is not known without reading it (filter, interleave, TFRecord files).
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

class Dataset;
using MapFn = std::function<Element(Element)>;
using FilterFn = std::function<bool(const Element&)>;
using InterleaveFn = std::function<Dataset(const Element&)>;

struct MapOptions {
  int num_parallel_calls = 1;  // or kAutotune
  bool deterministic = true;   // false: yield results as they complete
};

struct InterleaveOptions {
  int cycle_length = 4;  // input elements open at once
  int block_length = 1;  // consecutive elements taken from each
  // 1: open datasets are read on the consumer's thread. More (or kAutotune):
  // each open dataset is read ahead by its own thread; the order is the same.
  int num_parallel_calls = 1;
};

enum class Compression : uint8_t { none, gzip, zlib };

// For Dataset::from_image_folder (data/image_folder.h has the details).
struct ImageFolderOptions {
  // The classes to read, in label order; each must be a sub-folder of the
  // root (a subset is allowed). Empty: every sub-folder, sorted by name.
  std::vector<std::string> class_names;
  // The classes a model knows, in its label order (a validation or test
  // folder for a model trained on another folder): label i is
  // known_classes[i] whatever folders this root has; a sub-folder that is
  // not one of them is refused, naming it; a known class may have no folder
  // (ImageFolderIndex::missing_classes). Not with class_names.
  std::vector<std::string> known_classes;
  // File name endings that count as images, compared case-insensitively; a
  // missing leading dot is added.
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png"};
  // Set: the images come in a new random order each pass, drawn from (seed,
  // pass) (Keras's image_dataset_from_directory shuffles its file list the
  // same way): no buffer of image bytes is needed to shuffle a folder.
  std::optional<uint64_t> shuffle_seed;
  // Adds {"origin": u8 bytes of the file's path} to each element, for
  // errors that name the file a bad image came from.
  bool with_origin = false;
};

// For Dataset::padded_batch (tf.data's padded_batch).
struct PaddedBatchOptions {
  // Per feature: the padded size of each dimension (one entry per dimension
  // of the element), -1 for the largest in the batch. Features not listed
  // pad every dimension to the largest in the batch.
  std::map<std::string, std::vector<int64_t>> padded_shapes;
  // Per feature: the value of the padding, converted to the feature's dtype
  // (it must be representable there); features not listed pad with 0.
  std::map<std::string, double> padding_values;
  bool drop_remainder = false;  // drop a last batch smaller than batch_size
};

namespace detail {
class Node;
}

// Inside a map function: a seed identifying the element being mapped (its
// position in the map's input and the pass), for random augmentations that
// must not depend on which thread runs the call or when. Throws Error outside
// a map call.
uint64_t element_random_seed();

// One pass over a Dataset. Not thread-safe: one consumer at a time.
class Iterator {
 public:
  Iterator();
  // `pipeline` keeps the nodes alive for as long as the iterator runs.
  Iterator(std::unique_ptr<class IteratorBase> impl, std::shared_ptr<detail::Node> pipeline);
  ~Iterator();
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;

  // The next element, or nullopt at the end. Rethrows pipeline errors; the
  // pass ends at the first (later calls return nullopt).
  std::optional<Element> next();

 private:
  std::shared_ptr<detail::Node> pipeline_;  // declared first: destroyed after impl_
  std::unique_ptr<IteratorBase> impl_;
  bool ended_by_error_ = false;
};

// The iterator interface that pipeline nodes implement.
class IteratorBase {
 public:
  virtual ~IteratorBase() = default;
  virtual std::optional<Element> next() = 0;
};

class Dataset {
 public:
  explicit Dataset(std::shared_ptr<detail::Node> node);

  // --- Sources ---------------------------------------------------------
  // One element per row (dimension 0) of the named tensors, which must share
  // their first dimension (tf.data.Dataset.from_tensor_slices).
  static Dataset from_tensors(std::vector<std::pair<std::string, Tensor>> columns);
  // Elements given explicitly.
  static Dataset from_elements(std::vector<Element> elements);
  // {"index": i32 ()} for 0 .. count-1.
  static Dataset range(int64_t count);
  // {"image": u8 (H, W[, C]), "label": i32 ()} from a pair of IDX files (gz or raw).
  static Dataset from_idx(const std::string& images_path, const std::string& labels_path);
  // One {"filename": u8 bytes} element per path, in order (for interleave).
  static Dataset from_files(std::vector<std::string> paths);
  // {"record": u8 (length,)} for each record of the TFRecord files, in order;
  // every record's masked CRC-32C is checked. with_origin adds {"origin":
  // u8 bytes of "FILE record N"} (N from 0), for errors that name the
  // record a bad example came from.
  static Dataset from_tfrecord(std::vector<std::string> paths,
                               Compression compression = Compression::none,
                               bool with_origin = false);
  // {"image": u8 (bytes,), the encoded file, "label": i32 ()} for each image
  // file of a folder of class sub-folders (Keras image_dataset_from_directory):
  // label i is the i-th class name; class by class, files sorted by path. The
  // folder is listed here: throws IoError naming the path for a missing root,
  // no class folders or a class folder without images, InvalidArgument for
  // bad options. A file that cannot be read throws IoError from next().
  // Decoding is a separate map (decode_image_fn), so that it can run in
  // parallel. files()/with_files() expose the image files for FILE sharding.
  static Dataset from_image_folder(const std::string& root, const ImageFolderOptions& options = {});
  // Elements from the program's own code (tf.data's from_generator): each
  // pass k calls make_pass(k) once, when the pass starts, and then the
  // iterator's next() until it returns nullopt, one call at a time, on the
  // thread that pulls from the source. `cardinality`: the elements a pass
  // yields when known (kUnknownCardinality otherwise, kInfiniteCardinality
  // for an endless source). Not splittable by FILE sharding; DATA sharding
  // reads every element and keeps its share.
  using PassFn = std::function<std::unique_ptr<IteratorBase>(int64_t pass)>;
  static Dataset from_generator(PassFn make_pass, std::string label = "generator",
                                int64_t cardinality = kUnknownCardinality);

  // --- Transformations -------------------------------------------------
  Dataset map(MapFn fn, MapOptions options = {}) const;
  Dataset filter(FilterFn predicate) const;
  // Stacks batch_size consecutive elements along a new dimension 0; the last
  // batch is partial unless drop_remainder. Elements must share shapes and
  // dtypes feature by feature (ShapeError naming the feature otherwise).
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // Like batch, but each feature's elements may differ in size: every
  // dimension is padded (at its end) to the batch's largest, or to the fixed
  // size in options.padded_shapes, with options.padding_values (default 0).
  // Any dtype. The elements' ranks and dtypes must agree feature by feature
  // (ShapeError naming the feature); a fixed size smaller than an element is
  // a ShapeError; a padded_shapes entry with the wrong rank, or an option
  // naming a feature the elements lack, or a padding value the dtype cannot
  // hold, is an InvalidArgument. These are reported from next().
  Dataset padded_batch(int64_t batch_size, PaddedBatchOptions options = {}) const;
  // Fills a buffer of buffer_size elements and yields a random one each time.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // count < 0: forever (ending, for good, at a pass of its input that
  // yields nothing); count passes otherwise, empty ones included.
  Dataset repeat(int64_t count = -1) const;
  Dataset take(int64_t count) const;
  Dataset skip(int64_t count) const;
  // Every num_shards-th element, starting at index (element-wise sharding).
  Dataset shard(int64_t num_shards, int64_t index) const;
  // The first pass fills the cache (memory, or the file at path); later passes
  // read it. A pass stopped early does not leave a partial cache behind.
  Dataset cache(const std::string& path = "") const;
  // A background thread keeps up to buffer_size elements ready.
  Dataset prefetch(int64_t buffer_size = kAutotune) const;
  // Maps each input element to a dataset and interleaves their elements.
  Dataset interleave(InterleaveFn fn, InterleaveOptions options = {}) const;

  // Starts a pass.
  Iterator iterator() const;
  // Starts a pass numbered `pass` at every stage of the pipeline: shuffles
  // draw their order and maps their element seeds from it, so pass k is the
  // same whatever passes came before (an epoch resumed in a new process
  // replays the uninterrupted run's epoch k). Stages below a repeat(n)
  // number their passes k*n, k*n + 1, ..., so that passes k and k + 1 never
  // share an input pass (below an endless repeat: k * 2^32, ...). Not below
  // a cache: it replays the
  // first pass that filled it, whichever that was (as tf.data's), so put
  // shuffles and random maps above it.
  Iterator iterator(int64_t pass) const;
  // Elements one pass yields, when known without reading the data;
  // kInfiniteCardinality or kUnknownCardinality otherwise.
  int64_t cardinality() const;
  // "tensors -> map(autotune) -> batch(128) -> prefetch(autotune)"
  std::string describe() const;
  // Per-stage counters of every pass so far, source first.
  std::vector<StageStats> stats() const;

  const std::shared_ptr<detail::Node>& node() const { return node_; }

 private:
  std::shared_ptr<detail::Node> node_;
};

}  // namespace tandem::data
