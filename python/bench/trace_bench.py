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


def simulate_overhead():
    """simulate()'s time beyond thunky-sim's own on a 3-command schedule."""
    import os
    import subprocess
    import tempfile

    @thunky.jit
    def init_and_copy(src_ref, dst_ref):  # the guide's hello world
        thunky.memzero(dst_ref)
        thunky.copy(src_ref.at[:4], dst_ref.at[:4])
        thunky.memset(dst_ref.at[4:], np.float32(1.0))

    args = (np.arange(8, dtype=np.float32), thunky.new_ref(np.zeros(8, np.float32)))
    with tempfile.TemporaryDirectory() as d:
        sched = init_and_copy.trace(*args).save(d)
        tool = thunky.find_tool("thunky-sim")
        direct, through = [], []
        for _ in range(10):
            t0 = time.perf_counter()
            subprocess.run([tool, sched, "--machine", "h100-8gpu", "--report", os.path.join(d, "r.json")], capture_output=True, check=True)
            direct.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            init_and_copy.simulate(*args, machine="h100-8gpu")
            through.append(time.perf_counter() - t0)
    print(f"simulate on a 3-command schedule: {min(through) * 1e3:.1f} ms, thunky-sim alone {min(direct) * 1e3:.1f} ms "
          f"(best of 10): {1e3 * (min(through) - min(direct)):.1f} ms added")


if __name__ == "__main__":
    simulate_overhead()


def call_jax_lowering():
    """Lowering a jaxpr of 1,000 equations through call_jax (the target: at
    most 1 s): 250 layers of a GEMM, a bias, a tanh and a store, so that
    neither fusion nor inlining shortens it."""
    import jax
    import jax.numpy as jnp

    def layers(x_ref, w_ref, out_ref):
        x = x_ref[...]
        for i in range(250):
            x = jnp.tanh(x @ w_ref[...] + float(i))
            out_ref[...] = x

    @thunky.jit
    def prog(x_ref, w_ref, out_ref):
        thunky.call_jax(layers, x_ref, w_ref, out_ref)

    x = np.zeros((8, 8), np.float32)
    args = (x, x, thunky.new_ref(x.copy()))
    equations = len(jax.make_jaxpr(layers)(jax.new_ref(jnp.asarray(x)), jax.new_ref(jnp.asarray(x)), jax.new_ref(jnp.asarray(x))).eqns)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        doc = prog.trace(*args).to_dict()
        times.append(time.perf_counter() - t0)
    print(f"call_jax: a jaxpr of {equations} equations traced and lowered to {len(doc['program'])} commands in {times[0]:.2f} s "
          f"the first time, {min(times[1:]):.2f} s after")


if __name__ == "__main__":
    call_jax_lowering()
