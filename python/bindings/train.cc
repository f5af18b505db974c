// tandem's Trainer from Python: the C++ fit/evaluate loop with its
// configuration given as a dict (tandem/training.py builds it from Keras's
// compile() and fit() arguments) and the model as a built-in, a model-file
// text or a Python builder. fit() runs without the GIL; the callbacks and a
// Python model's forward take it. Ctrl-C during fit stops after the current
// step with a checkpoint (as `tandem train` does).
#include <signal.h>
#include <atomic>

#include <csignal>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "common.h"
#include "tandem/base/error.h"
#include "tandem/distribute/engine_state.h"
#include "tandem/distribute/state_broadcast.h"
#include "tandem/monitor/monitor.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/summary.h"
#include "tandem/train/trainer.h"
#include "training_options.h"

namespace tandem::python {

namespace {

py::dict epoch_logs(const train::EpochResult& e) {
  py::dict logs;
  logs["loss"] = e.train_loss;
  for (const auto& [name, value] : e.train_metrics) logs[py::str(name)] = value;
  // A NaN validation loss is a figure (Keras passes it on: callbacks count
  // it as no improvement), not the absence of validation data.
  if (e.validated) {
    logs["val_loss"] = e.validation_loss;
    for (const auto& [name, value] : e.validation_metrics) logs[py::str("val_" + name)] = value;
  }
  logs["examples_per_second"] = e.examples_per_second;
  logs["learning_rate"] = e.learning_rate;
  logs["seconds"] = e.train_seconds;
  logs["examples"] = e.train_examples;
  logs["loss_scale"] = e.loss_scale;
  return logs;
}

py::dict step_logs(const train::StepInfo& s) {
  py::dict logs;
  logs["epoch"] = s.epoch;
  logs["step"] = s.step;
  logs["global_step"] = s.global_step;
  logs["loss"] = s.loss;
  logs["learning_rate"] = s.learning_rate;
  logs["batch_examples"] = s.batch_examples;
  logs["step_seconds"] = s.step_seconds;
  logs["input_seconds"] = s.input_seconds;
  logs["skipped"] = s.skipped;
  return logs;
}

// The trainer Ctrl-C stops (one fit at a time per process).
std::atomic<train::Trainer*> interruptible{nullptr};

extern "C" void stop_on_interrupt(int) {
  if (train::Trainer* t = interruptible.load()) t->request_stop();
}

// While fit runs, Ctrl-C asks the trainer to stop (Python's own handler
// would wait for the GIL, which fit does not hold).
class InterruptStops {
 public:
  // sigaction, not std::signal: restoring Python's handler through signal()
  // dropped its flags (SA_ONSTACK) and set SA_RESTART, so that Ctrl-C no
  // longer interrupted a blocking read after the first fit.
  // A fit while another runs (in another Python thread) leaves the first's
  // handler in place: swapping them out of order left Ctrl-C ignored.
  explicit InterruptStops(train::Trainer& trainer) {
    train::Trainer* none = nullptr;
    installed_ = interruptible.compare_exchange_strong(none, &trainer);
    if (!installed_) return;
    struct sigaction stop {};
    stop.sa_handler = stop_on_interrupt;
    sigemptyset(&stop.sa_mask);
    ::sigaction(SIGINT, &stop, &previous_);
  }
  ~InterruptStops() {
    if (!installed_) return;
    ::sigaction(SIGINT, &previous_, nullptr);
    interruptible.store(nullptr);
  }
  InterruptStops(const InterruptStops&) = delete;
  InterruptStops& operator=(const InterruptStops&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

// What fit writes besides checkpoints, as tandem train does, on the chief:
// the monitor's metrics.jsonl, trace and TensorBoard event files, and
// summary.json in the run directory (output_dir).
struct RunOutputs {
  bool monitor = true;
  int64_t metrics_every = 1;
  // Unset: RUN_DIR/tensorboard with a run directory, none without; empty: none.
  std::optional<std::string> tensorboard;
  int64_t trace_first = 0, trace_last = 0;
};

RunOutputs outputs_from(const py::dict& d) {
  RunOutputs o;
  for (const auto& [k, v] : d) {
    const std::string key = k.cast<std::string>();
    if (key == "monitor")
      o.monitor = as<bool>(v, key);
    else if (key == "metrics_every")
      o.metrics_every = as<int64_t>(v, key);
    else if (key == "tensorboard") {
      if (py::isinstance<py::bool_>(v)) {
        if (v.cast<bool>()) throw py::value_error("tensorboard must be a directory, None or False");
        o.tensorboard = "";
      } else if (!v.is_none()) {
        o.tensorboard = as<std::string>(v, key);
      }
    } else if (key == "trace_steps") {
      if (v.is_none()) continue;
      const auto window = as<std::pair<int64_t, int64_t>>(v, key);
      std::tie(o.trace_first, o.trace_last) = window;
    } else {
      throw py::value_error("unknown run output option '" + key + "'");
    }
  }
  return o;
}

// The chief's monitor for this fit, or null (not the chief, switched off,
// or nowhere to write).
std::unique_ptr<monitor::Monitor> make_monitor(train::Trainer& trainer, const RunOutputs& o,
                                               const data::Dataset& train_data) {
  const std::string& run_dir = trainer.config().output_dir;
  const std::string tensorboard =
      o.tensorboard ? *o.tensorboard
                    : (run_dir.empty() ? "" : train::RunDirectory(run_dir).tensorboard());
  if (!o.monitor || (run_dir.empty() && tensorboard.empty())) {
    if (o.trace_first > 0) throw py::value_error("trace_steps needs the monitor and an output_dir");
    return nullptr;
  }
  // Collective under multi-worker: every process takes part.
  const int64_t steps_per_epoch = trainer.steps_per_epoch(train_data);
  if (!trainer.strategy().is_chief()) return nullptr;
  std::optional<data::Element> example;
  if (train_data.cardinality() != data::kUnknownCardinality)
    example = train_data.take(1).iterator().next();
  monitor::RunInfo info = monitor::describe_training_run(trainer, steps_per_epoch, example);
  return std::make_unique<monitor::Monitor>(
      monitor::MonitorOptions{.run_dir = run_dir,
                              .append = trainer.config().resume,
                              .metrics_every = o.metrics_every,
                              .trace_first = o.trace_first,
                              .trace_last = o.trace_last,
                              .tensorboard_dir = tensorboard},
      std::move(info));
}

// summary.json in the run directory (the chief's, with a run directory).
void write_run_summary(train::Trainer& trainer, const train::TrainResult& result,
                       monitor::Monitor* run_monitor) {
  const std::string& run_dir = trainer.config().output_dir;
  if (run_dir.empty() || !trainer.strategy().is_chief()) return;
  std::map<std::string, std::string> sections;
  if (run_monitor) {
    run_monitor->finish();
    sections["monitor"] = run_monitor->summary_json();
  }
  const distribute::Strategy& strategy = trainer.strategy();
  const std::map<std::string, std::string> extra = {
      {"strategy", strategy.name()},
      {"replicas", std::to_string(strategy.global_replicas())},
      {"threads_per_replica", std::to_string(strategy.threads_per_replica())},
      {"frontend", "python"}};
  train::write_summary(train::RunDirectory(run_dir).summary(), trainer.config(),
                       trainer.model_spec(), result, extra, sections);
}

// `factory`, recording the first model it builds in `first`.
train::ModelFactory keeping_first(train::ModelFactory factory, std::shared_ptr<nn::Module>& first) {
  factory.build = [&first, build = std::move(factory.build)] {
    std::shared_ptr<nn::Module> model = build();
    if (!first) first = model;
    return model;
  };
  return factory;
}

class PythonTrainer {
 public:
  // Building the replicas, comparing them and broadcasting the weights (and,
  // across processes, setting up the communicators) run without the GIL, as
  // the engine's do: other Python threads went on hold for all of it. A
  // Python model's builder takes the GIL back.
  PythonTrainer(const py::dict& options, const py::dict& model) {
    train::TrainConfig config = config_from(options);
    train::ModelFactory factory = keeping_first(factory_from(model), first_);
    py::gil_scoped_release release;
    trainer_ = std::make_unique<train::Trainer>(std::move(config), std::move(factory));
  }

  // Takes `from`'s model, optimizer and loss-scaler state (collective:
  // every process calls it). save_state gives the whole state to the chief
  // alone, so under several processes global replica 0 first sends it to
  // every replica over this trainer's communicators.
  void adopt_state(PythonTrainer& from) {
    distribute::EngineState state = from.trainer().engine().save_state();
    distribute::Strategy& strategy = trainer().strategy();
    if (strategy.global_replicas() != strategy.local_replicas()) {
      distribute::EngineState everywhere;
      strategy.run([&](int r) {
        comm::Communicator& comm = *strategy.communicator(r);
        distribute::EngineState received =
            distribute::broadcast_state(comm, comm.rank() == 0 ? &state : nullptr);
        if (r == 0) everywhere = std::move(received);
      });
      state = std::move(everywhere);
    }
    trainer().engine().load_state(state);
  }

  py::dict fit(const data::Dataset& train_data, const std::optional<data::Dataset>& validation,
               py::object on_step, py::object on_epoch, const py::dict& outputs) {
    const RunOutputs run_outputs = outputs_from(outputs);
    train::TrainResult result;
    std::vector<std::string> warnings;
    {
      py::gil_scoped_release release;
      std::unique_ptr<monitor::Monitor> run_monitor =
          make_monitor(*trainer_, run_outputs, train_data);
      train::TrainCallbacks callbacks;
      if (run_monitor || !on_step.is_none()) {  // the Trainer builds StepInfo only for a callback
        callbacks.on_step = [&](const train::StepInfo& s) {
          if (run_monitor) run_monitor->on_step(s);
          if (on_step.is_none()) return;
          py::gil_scoped_acquire gil;
          on_step(step_logs(s));
        };
      }
      callbacks.on_epoch = [&](const train::EpochResult& e) {
        if (run_monitor) run_monitor->on_epoch(e);
        if (on_epoch.is_none()) return;
        py::gil_scoped_acquire gil;
        if (on_epoch(e.epoch, epoch_logs(e)).cast<bool>()) trainer_->request_stop();
      };
      callbacks.on_membership_change = [&](const train::MembershipChange& c) {
        if (run_monitor) run_monitor->on_membership_change(c);
      };
      {
        const InterruptStops interrupts(*trainer_);
        result = trainer_->fit(train_data, validation, callbacks);
      }
      // An elastic job that changed its membership trains replicas built
      // again: the user's model takes their values.
      if (&trainer_->model() != first_.get()) {
        distribute::EngineState state;
        distribute::save_model_state(trainer_->model(), state);
        distribute::load_model_state(state, *first_);
      }
      write_run_summary(*trainer_, result, run_monitor.get());
      if (run_monitor) warnings = run_monitor->warnings();
    }
    py::dict out;
    out["interrupted"] = result.interrupted;
    out["input_exhausted"] = result.input_exhausted;
    out["wall_seconds"] = result.wall_seconds;
    out["resumed_from_step"] = result.resumed_from_step;
    out["warnings"] = warnings;
    return out;
  }

  py::dict evaluate(const data::Dataset& d) {
    train::EvalResult r;
    {
      py::gil_scoped_release release;
      r = trainer_->evaluate(d);
    }
    py::dict out;
    out["loss"] = r.loss;
    for (const auto& [name, value] : r.metrics) out[py::str(name)] = value;
    out["examples"] = r.examples;
    return out;
  }

  train::Trainer& trainer() { return *trainer_; }

 private:
  // The first replica's model at the start, the user's: an elastic job
  // builds its replicas again when its membership changes.
  std::shared_ptr<nn::Module> first_;
  std::unique_ptr<train::Trainer> trainer_;
};

}  // namespace

void bind_train(py::module_& m) {
  py::module_ t = m.def_submodule("train", "The C++ Trainer (use tandem.nn.Module.fit).");
  py::class_<PythonTrainer>(t, "Trainer")
      .def(py::init<const py::dict&, const py::dict&>(), py::arg("options"), py::arg("model"))
      .def("fit", &PythonTrainer::fit, py::arg("train"), py::arg("validation") = py::none(),
           py::arg("on_step") = py::none(), py::arg("on_epoch") = py::none(),
           py::arg("outputs") = py::dict())
      .def("evaluate", &PythonTrainer::evaluate, py::arg("data"))
      .def(
          "adopt_state",
          [](PythonTrainer& p, PythonTrainer& from) {
            py::gil_scoped_release release;
            p.adopt_state(from);
          },
          py::arg("trainer"),
          "Takes another trainer's model, optimizer and loss-scaler state (a second fit "
          "continues the first's optimizer, as Keras's does).")
      .def("request_stop", [](PythonTrainer& p) { p.trainer().request_stop(); })
      // A holder that owns nothing (so that the model passes where a
      // shared_ptr is taken), the trainer kept alive as long as it (the
      // return value policy alone is ignored for holders: the model was
      // read after the trainer was freed).
      .def(
          "model",
          [](PythonTrainer& p) {
            return std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>{}, &p.trainer().model());
          },
          py::keep_alive<0, 1>())
      .def("replicas", [](PythonTrainer& p) { return p.trainer().strategy().local_replicas(); })
      .def("checkpoint_path", [](PythonTrainer& p) { return p.trainer().checkpoint_path(); });
  t.def("option_names", [] {
    std::vector<std::string> names{"optimizer", "objective"};
    for (const std::string& name : training_option_names()) names.push_back(name);
    return names;
  });
}

}  // namespace tandem::python
