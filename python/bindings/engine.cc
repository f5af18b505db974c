// The step engine from Python, for custom training loops: a strategy's
// distribute::Engine over a model tandem/distribute.py describes, stepping
// on batches with a Python loss function (tf.distribute's strategy.run, a
// PyTorch loop over DDP). The loss function runs on every replica's thread
// holding the GIL; the engine's forward kernels, backward, all-reduce and
// update run without it.
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/distribute/strategy.h"
#include "tandem/train/checkpoint.h"
#include "training_options.h"

namespace tandem::python {
namespace {

// A batch's features in the order of the loss function's arguments.
struct BatchLayout {
  std::vector<std::string> names;
  bool as_dict = false;  // the function takes one dict instead of positional features
};

data::Element element_from(const py::dict& batch) {
  data::Element e;
  for (const auto& [k, v] : batch) e.set(k.cast<std::string>(), as_variable(v).value());
  return e;
}

// The Python function's arguments for a replica's rows: the model, then the
// features positionally or as one dict.
py::tuple call_arguments(nn::Module& model, const data::Element& rows, const BatchLayout& layout) {
  py::object module = py::cast(&model, py::return_value_policy::reference);
  if (layout.as_dict) {
    py::dict features;
    for (const std::string& name : layout.names) features[py::str(name)] = Variable(rows.at(name));
    return py::make_tuple(module, features);
  }
  py::tuple args(layout.names.size() + 1);
  args[0] = module;
  for (size_t i = 0; i < layout.names.size(); ++i) args[i + 1] = Variable(rows.at(layout.names[i]));
  return args;
}

// The gradient norm is measured only under clipping: None otherwise, as
// metrics.jsonl's null (0.0 read as a measured norm).
py::dict step_result(const distribute::StepResult& r, bool clipping) {
  py::dict out;
  out["loss"] = r.loss;
  out["global_rows"] = r.global_rows;
  out["skipped"] = r.skipped;
  out["loss_scale"] = r.loss_scale;
  out["gradient_norm"] =
      clipping ? py::object(py::float_(r.gradient_norm)) : py::object(py::none());
  out["seconds"] = r.seconds;
  out["exposed_communication_seconds"] = r.exposed_communication_seconds;
  return out;
}

class PythonEngine;
// The engines Python holds, closed by the package's atexit hook (see
// end_open_passes in data.cc: once the interpreter finalizes, a worker that
// takes the GIL to finish a queued step is ended mid-call).
std::mutex live_engines_mutex;
std::set<PythonEngine*> live_engines;

class PythonEngine {
 public:
  // options: the strategy's (its name, devices, ...), the optimizer's
  // config and the engine settings, as fit's options name them.
  PythonEngine(const py::dict& options, const py::dict& model) {
    const train::TrainConfig config = config_from(options);
    train::ModelFactory factory = factory_from(model);
    spec_ = factory.spec;
    const distribute::EngineOptions engine_options = train::engine_options_of(config, spec_.policy);
    py::gil_scoped_release release;  // a Python model's constructor takes it back
    strategy_ = distribute::make_strategy(config.strategy);
    engine_ = strategy_->make_engine(factory.build, engine_options);
    clipping_ = engine_options.optimizer.global_clip_norm > 0.0;
    std::lock_guard<std::mutex> lock(live_engines_mutex);
    live_engines.insert(this);
  }
  // The parameter server's workers may be finishing queued steps, which
  // take the GIL to call the loss function: ending them without giving the
  // GIL up deadlocked `del engine`.
  ~PythonEngine() {
    {
      std::lock_guard<std::mutex> lock(live_engines_mutex);
      live_engines.erase(this);
    }
    if (PyGILState_Check() == 0) return;
    if (_Py_IsFinalizing()) {
      // Not closed at exit (made after the hook ran): left running.
      engine_.release();    // NOLINT: left to the exit
      strategy_.release();  // NOLINT
      return;
    }
    close();
  }
  PythonEngine(const PythonEngine&) = delete;
  PythonEngine& operator=(const PythonEngine&) = delete;

  void check_open() const {
    if (!engine_) throw py::value_error("the engine was closed (at interpreter exit)");
  }

  // Ends the engine (its workers finish first, with the GIL given up);
  // later calls say so.
  void close() {
    py::gil_scoped_release release;
    engine_.reset();
    strategy_.reset();
  }

  py::dict step(const py::dict& batch, const BatchLayout& layout, py::function loss_fn,
                int64_t step_index, std::optional<double> learning_rate) {
    const data::Element rows = element_from(batch);
    auto held = keep_python(std::move(loss_fn));
    // The layout by value: the parameter server's workers run this after
    // step() returned (a reference read freed memory).
    const distribute::ForwardFn forward = [held, layout](nn::Module& model,
                                                         const distribute::ReplicaBatch& b) {
      py::gil_scoped_acquire gil;
      return as_variable((*held)(*call_arguments(model, b.rows, layout)));
    };
    distribute::StepResult r;
    {
      py::gil_scoped_release release;
      r = engine().step(rows, forward, {.step = step_index, .learning_rate = learning_rate});
    }
    return step_result(r, clipping_);
  }

  // fn's results on every local replica's rows, in replica order (None
  // where it returned None).
  py::list evaluate(const py::dict& batch, const BatchLayout& layout, py::function fn) {
    const data::Element rows = element_from(batch);
    auto held = keep_python(std::move(fn));
    std::vector<std::shared_ptr<py::object>> outputs(
        static_cast<size_t>(strategy().local_replicas()));
    {
      py::gil_scoped_release release;
      engine().evaluate(rows, [&](nn::Module& model, const distribute::ReplicaBatch& b) {
        py::gil_scoped_acquire gil;
        outputs[b.context.local_replica] =
            keep_python((*held)(*call_arguments(model, b.rows, layout)));
      });
    }
    py::list out;
    for (const auto& o : outputs) out.append(o ? *o : py::none());
    return out;
  }

  void save_state(const std::string& path) {
    py::gil_scoped_release release;
    if (!strategy().is_chief()) {
      distribute::DiscardingStateWriter nothing;  // the gathers are collective
      engine().save_state(nothing);
      return;
    }
    std::map<std::string, std::string> metadata;
    train::write_spec(spec_, metadata);
    train::CheckpointWriter writer(path, metadata);
    engine().save_state(writer);
    writer.commit();
  }

  void load_state(const std::string& path) {
    py::gil_scoped_release release;
    engine().load_state(train::load_checkpoint(path));
  }

  py::object model(int replica) {
    if (replica < 0 || replica >= strategy().local_replicas())
      throw py::index_error("replica " + std::to_string(replica) +
                            " out of range (the engine has " +
                            std::to_string(strategy().local_replicas()) + " local replicas)");
    return py::cast(&engine().model(replica), py::return_value_policy::reference);
  }

  distribute::Strategy& strategy() {
    check_open();
    return *strategy_;
  }
  distribute::Engine& engine() {
    check_open();
    return *engine_;
  }

 private:
  train::ModelSpec spec_;
  std::unique_ptr<distribute::Strategy> strategy_;
  std::unique_ptr<distribute::Engine> engine_;
  bool clipping_ = false;  // the optimizer clips by global norm (the step measures it)
};

// The package's atexit hook: ends every engine still open while its
// workers can take the GIL.
void close_open_engines() {
  std::set<PythonEngine*> open;
  {
    std::lock_guard<std::mutex> lock(live_engines_mutex);
    open.swap(live_engines);
  }
  for (PythonEngine* e : open) e->close();
}

BatchLayout layout_from(const py::object& names, bool as_dict) {
  return {names.cast<std::vector<std::string>>(), as_dict};
}

}  // namespace

void bind_engine(py::module_& m) {
  py::module_ d =
      m.def_submodule("engine", "The step engine for custom loops (use Strategy.engine).");
  d.def("_close_open_engines", &close_open_engines,
        "Ends every engine still open (tandem's atexit hook, before the interpreter finalizes).");
  py::class_<PythonEngine>(d, "Engine")
      .def(py::init<const py::dict&, const py::dict&>(), py::arg("options"), py::arg("model"))
      .def("step",
           [](PythonEngine& e, const py::dict& batch, const py::object& names, bool as_dict,
              py::function fn, int64_t step, std::optional<double> lr) {
             return e.step(batch, layout_from(names, as_dict), std::move(fn), step, lr);
           })
      .def("evaluate",
           [](PythonEngine& e, const py::dict& batch, const py::object& names, bool as_dict,
              py::function fn) {
             return e.evaluate(batch, layout_from(names, as_dict), std::move(fn));
           })
      .def("synchronize",
           [](PythonEngine& e) {
             py::gil_scoped_release release;
             return e.engine().synchronize().global_rows;
           })
      .def("save_state", &PythonEngine::save_state, py::arg("path"))
      .def("load_state", &PythonEngine::load_state, py::arg("path"))
      // The replica's model lives in the engine: the engine lives as long.
      .def("model", &PythonEngine::model, py::arg("replica") = 0, py::keep_alive<0, 1>())
      .def("name", [](PythonEngine& e) { return e.engine().name(); })
      .def("local_replicas", [](PythonEngine& e) { return e.strategy().local_replicas(); })
      .def("global_replicas", [](PythonEngine& e) { return e.strategy().global_replicas(); })
      .def("is_chief", [](PythonEngine& e) { return e.strategy().is_chief(); })
      .def("learning_rate",
           [](PythonEngine& e) { return e.engine().optimizer(0).learning_rate(); });
  d.def("launched_rank", &comm::launched_rank,
        "This process's rank as its launcher (mpirun or tandem launch) gives it (-1: not given).");
  d.def("launched_process_count", &comm::launched_process_count,
        "The processes the launcher (mpirun or tandem launch) started (0: not launched).");
}

}  // namespace tandem::python
