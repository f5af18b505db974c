"""A GPT-style Transformer written in Python with tandem's layers and ops,
trained on the King James Bible (Debian's bible-kjv) as the built-in `gpt`
is in docs/models.md: the same architecture (token and learned position
embeddings, pre-norm blocks of causal self-attention and a tanh-GELU MLP,
a final LayerNorm, logits through the tied token embedding), data and
recipe. The forward is Python; every op and the whole backward run in C++.

    tandem data text --corpus kjv --output data/kjv
    PYTHONPATH=build/python python3 examples/python/kjv_transformer.py --data data/kjv --steps 200

Options: --precision mixed_bfloat16, --devices N (mirrored), --layers/--width/--heads.
"""
import argparse
import math
import os

import numpy as np

import tandem
from tandem import ops
from tandem.nn import LayerNorm, Linear, Module, Parameter


class Block(Module):
    """Pre-norm Transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = LayerNorm(width)
        self.qkv = Linear(width, 3 * width)
        self.proj = Linear(width, width)
        self.norm2 = LayerNorm(width)
        self.fc = Linear(width, 4 * width, activation="gelu_tanh")
        self.out = Linear(4 * width, width)

    def forward(self, x):
        batch, time, width = x.shape
        # (B, T, 3C) -> (3, B, H, T, D): q, k and v are views of one tensor.
        qkv = ops.permute(ops.reshape(self.qkv(self.norm1(x)),
                                      (batch, time, 3, self.heads, width // self.heads)),
                          [2, 0, 3, 1, 4])
        y = ops.attention_packed(qkv, causal=True)
        x = x + self.proj(ops.reshape(ops.permute(y, [0, 2, 1, 3]), (batch, time, width)))
        return x + self.out(self.fc(self.norm2(x)))


class Transformer(Module):
    def __init__(self, vocabulary=256, context=128, layers=6, width=256, heads=8, seed=0):
        super().__init__()
        self.context = context
        self.tokens = tandem.nn.Embedding(vocabulary, width)
        self.positions = tandem.nn.Embedding(context, width)
        for i in range(layers):
            setattr(self, f"block{i}", Block(width, heads))
        self.layers = layers
        self.norm = LayerNorm(width)
        self.position_ids = None
        # Under a mixed policy the blocks run in its 16-bit dtype (their
        # Linear layers output it); the embeddings are float32 (as Keras's).
        self.activation_dtype = {"mixed_bfloat16": tandem.bfloat16,
                                 "mixed_float16": tandem.float16}.get(tandem.global_policy())
        # GPT-2's initialisation: N(0, 0.02) weights, the residual branches'
        # output projections scaled by 1/sqrt(2 x layers), zero biases.
        rng = np.random.default_rng(seed)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                tandem.nn.init.zeros_(p)
            elif "norm" not in name:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                tandem.nn.init.normal_(p, std=std, generator=rng)

    def forward(self, tokens):
        time = tokens.shape[1]
        if self.position_ids is None or self.position_ids.shape[0] != time:
            self.position_ids = tandem.tensor(list(range(time)), dtype=tandem.int32)
        x = self.tokens(tokens) + self.positions(self.position_ids)
        if self.activation_dtype is not None:
            x = ops.cast(x, self.activation_dtype)
        for i in range(self.layers):
            x = getattr(self, f"block{i}")(x)
        # Tied output projection: logits = x . E^T.
        return ops.linear(self.norm(x), self.tokens.weight)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="data/kjv", help="tandem data text --corpus kjv's output")
    parser.add_argument("--steps", type=int, default=200, help="training steps (batches of 32)")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--output", default=None, help="run directory (tandem report reads it)")
    args = parser.parse_args()

    tandem.set_global_policy(args.precision)
    train = tandem.data.Dataset.from_spec(os.path.join(args.data, "train.toml"))
    validation = tandem.data.Dataset.from_spec(os.path.join(args.data, "validation.toml"))
    strategy = tandem.distribute.MirroredStrategy(devices=args.devices)
    with strategy.scope():
        model = Transformer(layers=args.layers, width=args.width, heads=args.heads)
        model.compile(optimizer=tandem.optimizers.AdamW(6e-4, weight_decay=0.01, global_clipnorm=1.0),
                      loss="sparse_categorical_crossentropy", metrics=["perplexity", "bits_per_byte"])
    history = model.fit(train, batch_size=32, epochs=1, steps_per_epoch=args.steps,
                        validation_data=validation.take(64 * 32), output_dir=args.output, verbose=1)
    logs = {k: v[-1] for k, v in history.history.items()}
    print(f"{model.parameter_count() if hasattr(model, 'parameter_count') else ''} parameters; "
          f"validation loss {logs['val_loss']:.3f} (perplexity {math.exp(logs['val_loss']):.2f}), "
          f"{logs['examples_per_second'] * 128:,.0f} tokens/s")


if __name__ == "__main__":
    main()
