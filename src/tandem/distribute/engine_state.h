#pragma once
// EngineState: a training state as named tensors and string metadata, what
// an engine saves and loads and what a checkpoint file holds
// (train::Checkpoint is this type). Names used by the engines:
// "model.<parameter>", "buffer.<buffer>", "optimizer.<slot>"; metadata
// "loss_scale", "loss_scale_skipped", "loss_scale_good_steps" under loss
// scaling; the Trainer adds its position and configuration.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/nn/module.h"
#include "tandem/tensor/tensor.h"

namespace tandem::distribute {

struct EngineState {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;

  // The tensor with this name; throws IoError when absent.
  const Tensor& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const;
  // Copies the tensor with this name into `target`; throws IoError when it is
  // absent or differs from target in shape or dtype.
  void load_into(const std::string& name, Tensor& target) const;
  // load_into's checks alone: throws IoError where it would, copies nothing.
  void check_loads_into(const std::string& name, const Tensor& target) const;
  // Metadata value; throws IoError when absent.
  const std::string& meta(const std::string& key) const;
  // The metadata value read whole as a number; IoError naming the key when
  // it is absent or is not wholly one number in the type's range (std::stoll
  // and std::stoull took "12abc" for 12, and stoull "-1" for 2^64 - 1).
  int64_t meta_integer(const std::string& key) const;
  uint64_t meta_unsigned(const std::string& key) const;
  double meta_number(const std::string& key) const;
};

// One tensor of a state as a writer is told of it before its bytes exist.
struct TensorLayout {
  std::string name;
  Shape shape;
  DType dtype;
};

// Where an engine saves its state tensor by tensor, so that no device holds
// all of it at once (ZeRO's optimizer state is gathered bucket by bucket and
// written as it arrives). The engine calls begin() once, with its metadata
// and every tensor in the order it will give them, then put() for each in
// that order. A process that keeps nothing (not the chief) gets a writer
// that drops them: every process saves (the gathers are collective).
class StateWriter {
 public:
  virtual ~StateWriter() = default;
  virtual void begin(const std::map<std::string, std::string>& metadata,
                     const std::vector<TensorLayout>& layout) = 0;
  virtual void put(const std::string& name, const Tensor& tensor) = 0;
};

// A writer that keeps nothing: what processes that do not write a
// checkpoint save into (they take part in the gathers).
class DiscardingStateWriter : public StateWriter {
 public:
  void begin(const std::map<std::string, std::string>&, const std::vector<TensorLayout>&) override {
  }
  void put(const std::string&, const Tensor&) override {}
};

// The state's tensors as a writer is told of them, in order.
std::vector<TensorLayout> layout_of(const EngineState& state);
// begin() with the state's metadata and tensors, then put() each.
void write_state(const EngineState& state, StateWriter& writer);

// Adds the model's parameters ("model.<name>") and buffers ("buffer.<name>").
void save_model_state(nn::Module& model, EngineState& state);
// Copies the state's parameters and buffers into `model`, which must have
// the same architecture (IoError naming the first tensor that is missing or
// differs in shape or dtype).
void load_model_state(const EngineState& state, nn::Module& model);
// load_model_state's checks alone (IoError), changing nothing.
void check_model_state(const EngineState& state, nn::Module& model);

}  // namespace tandem::distribute
