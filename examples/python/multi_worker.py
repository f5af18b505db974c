"""The Fashion-MNIST cnn trained over several processes: every process
runs this script under mpirun, MultiWorkerMirroredStrategy all-reduces
between them, fit shards the data, and only the chief (worker 0) writes
the run directory and prints.

    mpirun -np 2 env PYTHONPATH=build/python python3 examples/python/multi_worker.py --epochs 2

(as root, OpenMPI's mpirun needs --allow-run-as-root)."""
import argparse

import tandem

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--train-examples", type=int, default=0, help="0: all 60,000")
parser.add_argument("--output", default="runs/python_multi_worker")
args = parser.parse_args()

(x_train, y_train), (x_test, y_test) = tandem.data.fashion_mnist()
if args.train_examples:
    x_train, y_train = x_train[:args.train_examples], y_train[:args.train_examples]
strategy = tandem.distribute.MultiWorkerMirroredStrategy(devices=1)
tandem.set_global_policy("mixed_bfloat16")
with strategy.scope():
    model = tandem.models.cnn(seed=1)
    model.compile(optimizer=tandem.optimizers.SGD(0.05, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
train = tandem.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=1)
history = model.fit(train, batch_size=128, epochs=args.epochs, validation_data=(x_test, y_test),
                    output_dir=args.output, seed=1)
if strategy.is_chief:
    print(f"{strategy.num_workers} workers, {strategy.num_replicas_in_sync} replicas: test accuracy "
          f"{history.history['val_accuracy'][-1]:.2%}, "
          f"{history.history['examples_per_second'][-1]:,.0f} examples/s")
