#!/usr/bin/env python3
"""Times TensorFlow 2 (Keras 3) training steps of tandem's reference models
on synthetic in-memory data: the peer the mission starts from, beside
bench/pytorch/bench_models.py (same command line, same JSON fields).

    python3 bench_models.py --model gpt|resnet [--threads 1|2]
        [--precision float32|bf16] [--batch-size N] [--steps S] [--warmup W] [--json]

gpt: GPT-2 layout as bench/pytorch/models.py (token and position embeddings,
pre-norm blocks with a fused qkv projection, causal softmax attention,
tanh GELU MLP, final LayerNorm, logits through the tied token embedding),
AdamW lr 6e-4 weight decay 0.01, next-token cross entropy on random tokens.
resnet: CIFAR ResNet-20 (BasicBlocks, 1x1 conv + BatchNorm projections),
NHWC, SGD momentum 0.9 lr 0.05, cross entropy on random 28x28x1 images.
bf16 is Keras's mixed_bfloat16 policy (f32 variables, bf16 compute, f32
logits and loss). One tf.function step (forward, loss, gradients, apply),
as Model.fit runs it; each timed step ends by reading the loss.

Threads: intra-op = --threads, inter-op = 1; pin the process (taskset) so
that TensorFlow's other threads share the same cores.
"""
import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

DEFAULT_BATCH = {"gpt": 32, "resnet": 128}
DEFAULT_LR = {"gpt": 6e-4, "resnet": 0.05}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("gpt", "resnet"), required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", choices=("float32", "bf16"), default="float32")
    p.add_argument("--batch-size", type=int, help="default: gpt 32, resnet 128")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--batches", type=int, default=4, help="distinct synthetic batches cycled")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("gpt")
    g.add_argument("--vocabulary", type=int, default=256)
    g.add_argument("--context", type=int, default=128, help="also the sequence length")
    g.add_argument("--layers", type=int, default=6)
    g.add_argument("--width", type=int, default=256)
    g.add_argument("--heads", type=int, default=8)
    r = p.add_argument_group("resnet")
    r.add_argument("--depth", type=int, default=20)
    r.add_argument("--resnet-width", type=int, default=16)
    r.add_argument("--image-size", type=int, default=28)
    a = p.parse_args(argv)
    if a.batch_size is None:
        a.batch_size = DEFAULT_BATCH[a.model]
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.threads < 1 or a.batches < 1:
        p.error("steps, batch-size, threads and batches must be >= 1, warmup >= 0")
    if a.width % a.heads:
        p.error(f"--width {a.width} is not a multiple of --heads {a.heads}")
    if a.depth < 8 or (a.depth - 2) % 6:
        p.error(f"--depth must be 6n + 2 with n >= 1, got {a.depth}")
    return a


def gpt_model(keras, tf, a):
    width, heads, head_dim = a.width, a.heads, a.width // a.heads
    init = keras.initializers.RandomNormal(stddev=0.02)
    residual_init = keras.initializers.RandomNormal(stddev=0.02 / math.sqrt(2 * a.layers))

    class Attention(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.qkv = keras.layers.Dense(3 * width, kernel_initializer=init)
            self.proj = keras.layers.Dense(width, kernel_initializer=residual_init)

        def call(self, x):
            b, t = tf.shape(x)[0], tf.shape(x)[1]
            qkv = tf.reshape(self.qkv(x), (b, t, 3, heads, head_dim))
            q, k, v = tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)))  # each (B, H, T, D)
            scores = tf.matmul(q, k, transpose_b=True) * tf.cast(1.0 / math.sqrt(head_dim), q.dtype)
            causal = tf.linalg.band_part(tf.ones((t, t), tf.bool), -1, 0)
            scores = tf.where(causal, scores, tf.cast(-1e9, scores.dtype))
            y = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
            return self.proj(tf.reshape(tf.transpose(y, (0, 2, 1, 3)), (b, t, width)))

    class Block(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.norm1 = keras.layers.LayerNormalization(epsilon=1e-5)
            self.attention = Attention()
            self.norm2 = keras.layers.LayerNormalization(epsilon=1e-5)
            self.fc = keras.layers.Dense(4 * width, kernel_initializer=init)
            self.fc_proj = keras.layers.Dense(width, kernel_initializer=residual_init)

        def call(self, x):
            x = x + self.attention(self.norm1(x))
            hidden = tf.nn.gelu(self.fc(self.norm2(x)), approximate=True)
            return x + self.fc_proj(hidden)

    class Gpt(keras.Model):
        def __init__(self):
            super().__init__()
            self.token_embedding = keras.layers.Embedding(a.vocabulary, width,
                                                          embeddings_initializer=init)
            self.position_embedding = keras.layers.Embedding(a.context, width,
                                                             embeddings_initializer=init)
            self.blocks = [Block() for _ in range(a.layers)]
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5)

        def call(self, tokens):
            t = tf.shape(tokens)[1]
            x = self.token_embedding(tokens) + self.position_embedding(tf.range(t))
            for block in self.blocks:
                x = block(x)
            x = self.norm(x)
            table = tf.cast(self.token_embedding.embeddings, x.dtype)
            return tf.cast(tf.matmul(x, table, transpose_b=True), tf.float32)

    return Gpt()


def resnet_model(keras, a):
    layers = keras.layers

    def conv(filters, kernel, stride):
        return layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False)

    def batch_norm():
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)

    def block(x, filters, stride):
        out = layers.ReLU()(batch_norm()(conv(filters, 3, stride)(x)))
        out = batch_norm()(conv(filters, 3, 1)(out))
        shortcut = x
        if stride != 1 or x.shape[-1] != filters:
            shortcut = batch_norm()(conv(filters, 1, stride)(x))
        return layers.ReLU()(layers.Add()([out, shortcut]))

    images = keras.Input((a.image_size, a.image_size, 1))
    x = layers.ReLU()(batch_norm()(conv(a.resnet_width, 3, 1)(images)))
    n = (a.depth - 2) // 6
    for stage, filters in enumerate((a.resnet_width, 2 * a.resnet_width, 4 * a.resnet_width)):
        for j in range(n):
            x = block(x, filters, 2 if stage > 0 and j == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    logits = layers.Dense(10, dtype="float32")(x)
    return keras.Model(images, logits)


def run(a):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import keras

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(a.seed)
    if a.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = tf.random.Generator.from_seed(a.seed)
    if a.model == "gpt":
        model = gpt_model(keras, tf, a)
        optimizer = keras.optimizers.AdamW(learning_rate=DEFAULT_LR["gpt"], weight_decay=0.01)
        batches = []
        for _ in range(a.batches):
            tokens = rng.uniform((a.batch_size, a.context + 1), 0, a.vocabulary, tf.int32)
            batches.append((tokens[:, :-1], tokens[:, 1:]))
    else:
        model = resnet_model(keras, a)
        optimizer = keras.optimizers.SGD(learning_rate=DEFAULT_LR["resnet"], momentum=0.9)
        batches = [(rng.normal((a.batch_size, a.image_size, a.image_size, 1)),
                    rng.uniform((a.batch_size,), 0, 10, tf.int32)) for _ in range(a.batches)]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, tf.cast(model(x, training=True), tf.float32))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses, times = [], []
    for i in range(a.warmup + a.steps):
        x, y = batches[i % len(batches)]
        start = time.perf_counter()
        loss = float(train_step(x, y).numpy())
        elapsed = time.perf_counter() - start
        losses.append(loss)
        if i >= a.warmup:
            times.append(elapsed)

    # "over_steps" is tandem bench train's statistic (the timed steps' work
    # over their total time); the median of per-step rates runs higher
    # when a few steps are slow.
    def stats(per_step):
        values = [per_step / t for t in times]
        return {"median": statistics.median(values), "min": min(values), "max": max(values),
                "over_steps": per_step * len(times) / sum(times)}

    result = {
        "framework": "tensorflow",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "model": a.model,
        "parameters": int(sum(v.shape.num_elements() for v in model.trainable_variables)),
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "affinity": sorted(os.sched_getaffinity(0))},
        "precision": a.precision,
        "batch_size": a.batch_size,
        "steps": a.steps,
        "warmup": a.warmup,
        "optimizer": type(optimizer).__name__,
        "examples_per_s": stats(a.batch_size),
        "step_ms": {"median": 1e3 * statistics.median(times),
                    "min": 1e3 * min(times), "max": 1e3 * max(times)},
        "loss_first": losses[0],
        "loss_last": losses[-1],
    }
    if a.model == "gpt":
        result["tokens_per_s"] = stats(a.batch_size * a.context)
    return result


def main(argv=None):
    a = parse_args(argv)
    r = run(a)
    if a.json:
        print(json.dumps(r))
    else:
        e = r["examples_per_s"]
        print(f"{r['model']} {r['precision']} tensorflow {r['tensorflow']}: "
              f"{e['median']:.1f} ex/s ({e['min']:.1f}-{e['max']:.1f}), "
              f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}, "
              f"{r['parameters']} parameters")


if __name__ == "__main__":
    main()
