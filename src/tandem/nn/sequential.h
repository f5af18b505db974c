#pragma once
// Sequential: modules applied in order; children are named "0", "1", ...

#include <memory>
#include <vector>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Sequential : public Module {
 public:
  Sequential() = default;

  // Appends a module; returns *this for chaining.
  Sequential& add(std::shared_ptr<Module> module);
  template <typename M, typename... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }

  Variable forward(const Variable& input) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace tandem::nn
