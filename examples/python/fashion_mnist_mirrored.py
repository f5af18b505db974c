"""The seed's workflow in tandem: MirroredStrategy over this machine's
devices, a tf.data-style pipeline, Keras mixed precision, the reference CNN
on Fashion-MNIST (Debian's dataset-fashion-mnist).
    PYTHONPATH=build/python python3 examples/python/fashion_mnist_mirrored.py"""
import tandem

tandem.set_global_policy("mixed_bfloat16")
(x_train, y_train), (x_test, y_test) = tandem.data.fashion_mnist()
train = tandem.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000, seed=0).batch(128)

strategy = tandem.distribute.MirroredStrategy()
with strategy.scope():
    model = tandem.Sequential([
        tandem.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tandem.layers.MaxPooling2D(2),
        tandem.layers.Conv2D(64, 3, padding="same", activation="relu"),
        tandem.layers.MaxPooling2D(2),
        tandem.layers.Flatten(),
        tandem.layers.Dense(128, activation="relu"),
        tandem.layers.Dense(10),
    ], input_shape=(28, 28, 1))
    model.compile(optimizer=tandem.optimizers.SGD(0.05, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])

model.fit(train, epochs=5, validation_data=(x_test, y_test), verbose=1)
print("test accuracy:", model.evaluate(x_test, y_test)["accuracy"])
