#!/usr/bin/env python3
"""The memory planner's predictions against measured peaks.

Trains each reference model for a few steps at three batch sizes, in f32
and mixed_bfloat16, without and with ZeRO-2, on 2 mirrored devices, and
prints each device's predicted peak (summary.json's memory_plan) beside the
measured one (the allocator's high-water mark over the run) as a Markdown
table. Memory, not time: the figures do not depend on the machine's load.

    python3 bench/memory_plan.py --tandem build/tandem --kjv data/kjv

--kjv: the output folder of `tandem data text --corpus kjv` (for gpt).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS = {
    # model: (batch sizes, extra flags)
    "mlp": ([64, 256, 1024], ["--train-examples", "2048", "--test-examples", "256"]),
    "cnn": ([32, 128, 512], ["--train-examples", "1024", "--test-examples", "256"]),
    "resnet": ([32, 64, 128], ["--train-examples", "512", "--test-examples", "128"]),
    "gpt": ([8, 16, 32], ["--metrics", "bits_per_byte", "--optimizer", "adamw",
                          "--steps-per-epoch", "2"]),
}


def run(tandem, model, batch, precision, zero, kjv, work):
    batches, extra = MODELS[model]
    out = os.path.join(work, f"{model}-{batch}-{precision}-{zero}")
    cmd = [tandem, "train", "--model", model, "--batch-size", str(batch), "--epochs", "1",
           "--precision", precision, "--zero", str(zero), "--strategy", "mirrored",
           "--devices", "2", "--threads", "1", "--allow-oversubscription", "--quiet",
           "--no-tensorboard", "--output", out] + extra
    if model == "gpt":
        cmd += ["--data", os.path.join(kjv, "train.toml")]
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["memory_plan"]["devices"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tandem", default="build/tandem")
    parser.add_argument("--kjv", default="data/kjv")
    parser.add_argument("--models", default="mlp,cnn,resnet,gpt")
    args = parser.parse_args()
    print("| model | batch | precision | ZeRO | cpu:0 predicted | measured | ratio "
          "| cpu:1 predicted | measured | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            for batch in MODELS[model][0]:
                for precision in ("float32", "mixed_bfloat16"):
                    for zero in (0, 2):
                        devices = run(args.tandem, model, batch, precision, zero, args.kjv, work)
                        cells = []
                        for d in devices:
                            p, m = d["predicted_peak_bytes"], d["measured_peak_bytes"]
                            worst = max(worst, abs(p / m - 1.0))
                            cells += [f"{p / 2**20:.1f} MiB", f"{m / 2**20:.1f} MiB", f"{p / m:.3f}"]
                        print(f"| {model} | {batch} | {precision} | {zero} | " + " | ".join(cells) + " |",
                              flush=True)
    print(f"\nlargest error: {100 * worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
