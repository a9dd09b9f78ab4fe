"""Tracing and emitting a schedule of 100,000 commands (the target: at most
2 s on a 2-core VM). .venv/bin/python python/bench/trace_bench.py"""

import time

import numpy as np

import thunky


@thunky.jit
def many(a, b):
    for i in range(100_000):
        thunky.copy(a.at[i % 8], b.at[(i + 1) % 8])


def main():
    args = (np.zeros((8, 4), np.float32), thunky.new_ref(np.zeros((8, 4), np.float32)))
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        text = many.trace(*args).to_json()
        t1 = time.perf_counter()
        best = t1 - t0 if best is None else min(best, t1 - t0)
    print(f"trace and emit of 100,000 commands: {best:.2f} s (best of 3; {len(text) / 1e6:.1f} MB of sched.json)")


if __name__ == "__main__":
    main()
