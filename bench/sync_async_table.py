#!/usr/bin/env python3
"""Markdown table of `tandem bench sync-async --json` output (medians with
[min-max] over the seeds), for docs/performance.md and docs/sync_async.md.

    tandem bench sync-async --json > sync_async.json
    python3 bench/sync_async_table.py sync_async.json
"""
import json
import statistics
import sys


def spread(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main(path):
    with open(path) as f:
        bench = json.load(f)
    target = 100 * bench["target"]
    print(f"| mode | replica 1 | examples/s | vs sync | steps/s vs sync | time to {target:.0f}% (s) "
          f"| final accuracy (%) | mean staleness | dropped | update time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in bench["results"]:
        seeds = row["seeds"]
        reached = [s["time_to_target"] for s in seeds if s["time_to_target"] is not None]
        to_target = spread(reached, "{:.0f}")
        if len(reached) < len(seeds):
            to_target += f" ({len(reached)} of {len(seeds)} seeds)"
        staleness = row["mean_staleness"]
        print(
            f"| {row['mode']} | {str(bench['slow_factor']) + 'x slower' if row['straggler'] else 'even'} "
            f"| {spread([s['examples_per_second'] for s in seeds], '{:.0f}')} "
            f"| {row['examples_per_second_vs_first_mode']:.2f}x "
            f"| {row['steps_per_second_vs_first_mode']:.2f}x "
            f"| {to_target} "
            f"| {spread([None if s['final_accuracy'] is None else 100 * s['final_accuracy'] for s in seeds], '{:.2f}')} "
            f"| {'-' if staleness is None else f'{staleness:.2f}'} "
            f"| {100 * row['dropped_fraction']:.1f}% | {100 * row['update_fraction']:.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
