"""What `simulate` adds to thunky-sim at real sizes: a GEMM layer of 2 GiB
of bf16 arguments (x 16384 x 32768 and w 32768 x 16384, 1 GiB each), given
as shapes alone and as arrays. Targets: shapes add at most 50 ms over
thunky-sim on the same schedule; arrays add at most the time np.save
takes to write them. .venv/bin/python python/bench/sizes_bench.py"""

import os
import subprocess
import tempfile
import time

import ml_dtypes
import numpy as np

import thunky

BF16 = ml_dtypes.bfloat16
SHAPES = ((16384, 32768), (32768, 16384), (16384, 16384))


@thunky.jit
def layer(x_ref, w_ref, y_ref):
    thunky.call_jax(lambda x, w, y: y.__setitem__(Ellipsis, x[...] @ w[...]), x_ref, w_ref, y_ref)


def best(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    shapes = [thunky.ShapeDtypeStruct(s, BF16) for s in SHAPES]
    layer.simulate(*shapes)  # JAX's first trace of the lambda, out of the timing
    with tempfile.TemporaryDirectory() as d:
        sched = layer.trace(*shapes).save(d)
        tool = thunky.find_tool("thunky-sim")
        sim_alone = best(lambda: subprocess.run([tool, sched, "--machine", "h100-8gpu", "--report", os.path.join(d, "r.json"), "--svg",
                                                 os.path.join(d, "t.svg"), "--trace", os.path.join(d, "t.json")], check=True,
                                                capture_output=True))
    from_shapes = best(lambda: layer.simulate(*shapes))
    print(f"2 GiB of argument shapes: simulate {from_shapes * 1e3:.1f} ms, thunky-sim alone {sim_alone * 1e3:.1f} ms: "
          f"+{(from_shapes - sim_alone) * 1e3:.1f} ms (target: at most +50 ms)")

    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPES[0], np.float32).astype(BF16)
    w = rng.standard_normal(SHAPES[1], np.float32).astype(BF16)
    y = thunky.ShapeDtypeStruct(SHAPES[2], BF16)
    with tempfile.TemporaryDirectory() as d:
        save = best(lambda: (np.save(os.path.join(d, "x.npy"), x.view(np.uint16)), np.save(os.path.join(d, "w.npy"), w.view(np.uint16))),
                    n=2)
    from_arrays = best(lambda: layer.simulate(x, w, y), n=2)
    print(f"2 GiB of arrays: simulate {from_arrays:.2f} s; np.save of them {save:.2f} s and thunky-sim {sim_alone * 1e3:.1f} ms: "
          f"+{(from_arrays - save - sim_alone):.2f} s over both (target: at most the save)")


if __name__ == "__main__":
    main()
