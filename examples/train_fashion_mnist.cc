// Trains the reference mlp on Fashion-MNIST with the Trainer API: the C++
// counterpart of `tandem train --model mlp`. Usage: train_fashion_mnist [epochs] [data dir]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tandem/tandem.h"

int main(int argc, char** argv) {
  using namespace tandem;
  const int64_t epochs = argc > 1 ? std::atoll(argv[1]) : 1;
  const std::string dir = argc > 2 ? argv[2] : data::default_fashion_mnist_dir();
  try {
    const data::FashionMnist fashion = data::load_fashion_mnist(dir);
    train::Trainer trainer({.epochs = epochs}, train::builtin_model("mlp"));
    train::TrainCallbacks callbacks;
    callbacks.on_epoch = [](const train::EpochResult& e) {
      std::printf("epoch %lld: train loss %.4f, test accuracy %.2f%%, %.0f examples/s\n",
                  static_cast<long long>(e.epoch), e.train_loss,
                  100 * e.validation_metric("accuracy"), e.examples_per_second);
    };
    // Reshuffled every epoch; Fashion-MNIST's test set as the validation data.
    const data::Dataset train = data::as_dataset(fashion.train).shuffle(fashion.train.size(), 0);
    trainer.fit(train, data::as_dataset(fashion.test), callbacks);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
