"""The user guide's examples that do not use call_jax, in python/examples/
as the guide writes them (only the import changed), run from JAX as the
guide runs them: each prints the guide's result, traces to the commands of
its bundled schedule, and is predicted as thunky-sim predicts that file."""

import json
import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

import thunky

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(REPO, "python", "examples")

# (example file, its thunky.jit function, the bundled schedule)
GUIDE = [
    ("init_and_copy.py", "init_and_copy", "init_and_copy.json"),
    ("swap_halves.py", "swap_halves", "swap_halves.json"),
    ("copy_slices.py", "copy_slices", "copy_slices.json"),
    ("ptx_add_one.py", "run_ptx_add_one", "ptx_add_one.json"),
    ("cholesky.py", "cholesky_in_place", "cholesky.json"),
    ("sum_across_gpus.py", "sum_across_gpus", "sum_across_gpus.json"),
    ("grouped_exchange_and_reduce.py", "grouped_exchange_and_reduce", "grouped_exchange_and_reduce.json"),
    # call_jax, lowered through JAX:
    ("pipeline_call_jax.py", "pipeline", "pipeline_call_jax.json"),
    ("matmul_and_bias.py", "matmul_and_bias", "matmul_and_bias.json"),
    ("nested_functions.py", "outer_fn", "nested_functions.json"),
    ("tiled_gemm.py", "tiled_gemm", "tiled_gemm.json"),
    ("maybe_negate.py", "maybe_negate", "maybe_negate.json"),
    ("power_of_two_loop.py", "power_of_two_loop", "power_of_two_loop.json"),
    ("collatz.py", "collatz_length", "collatz.json"),
    ("concurrent_branches.py", "concurrent_branches", "concurrent_branches.json"),
    ("splice_jax_collective.py", "splice_jax_collective", "splice_jax_collective.json"),
]


def example(name):
    return runpy.run_path(os.path.join(EXAMPLES, name))


def ops(program, functions):
    """The ops of a program in order: calls replaced by their functions'
    ops, control-flow bodies bracketed."""
    out = []
    for c in program:
        if c["op"] == "call":
            out += ops(functions[c["fn"]]["program"], functions)
            continue
        out.append(c["op"])
        for key in ("body", "then", "else", "cond"):
            if isinstance(c.get(key), list):
                out += ["[" + key] + ops(c[key], functions) + ["]"]
        for b in c.get("branches", []):
            out += ["[branch"] + ops(b, functions) + ["]"]
    return out


def initial(b, shape):
    """The bundled buffer's first values where its init gives them (zeros elsewhere)."""
    dtype = {"f32": np.float32, "s32": np.int32, "bool": np.bool_}[b["dtype"]]
    init = b.get("init", {"kind": "zeros"})
    if init["kind"] == "values":
        return np.array(init["values"], dtype).reshape(shape)
    if init["kind"] == "iota":
        return np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)
    if init["kind"] in ("ones", "constant"):
        return np.full(shape, init.get("value", 1), dtype)
    return np.zeros(shape, dtype)


def bundled_arguments(doc):
    """The bundled file's arguments (global when sharded) with its first
    values, each a Ref, with the file's mesh and in_specs."""
    args, specs = [], []
    for b in doc["buffers"].values():
        if b["role"] == "scratch":
            continue
        shape = b.get("global", {}).get("shape", b["shape"])
        args.append(thunky.new_ref(initial(b, shape)))
        specs.append(thunky.P(*b["global"]["spec"]) if "global" in b else None)
    mesh = dict(zip(doc["mesh"]["axis_names"], doc["mesh"]["shape"])) if "mesh" in doc else None
    return args, dict(mesh=mesh, in_specs=tuple(specs) if mesh else None)


@pytest.mark.parametrize("file,fn,bundled", GUIDE, ids=[g[0] for g in GUIDE])
def test_a_guide_example_traces_to_its_bundled_commands_and_predicts_its_makespan(file, fn, bundled, tmp_path):
    doc = json.load(open(os.path.join(REPO, "examples", bundled)))
    args, where = bundled_arguments(doc)
    f = example(file)[fn]
    traced = f.trace(*args, **where).to_dict()
    assert ops(traced["program"], traced.get("functions", {})) == ops(doc["program"], doc.get("functions", {}))
    # Same roles for the same arguments, in order.
    ours = [b["role"] for b in traced["buffers"].values() if "role" in b]  # scratch buffers have none
    assert ours == [b["role"] for b in doc["buffers"].values() if b["role"] != "scratch"]
    report = tmp_path / "r.json"
    r = subprocess.run([thunky.find_tool("thunky-sim"), os.path.join(REPO, "examples", bundled), "--machine", "h100-8gpu", "--report",
                        str(report)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f.simulate(*args, machine="h100-8gpu", **where).makespan_s == pytest.approx(json.load(open(report))["makespan_s"], rel=1e-12)


@pytest.mark.parametrize("file,printed", [
    ("init_and_copy.py", "[0. 1. 2. 3. 1. 1. 1. 1.]"),
    # The guide's tril of the factor: A = L L^T with L = [[2 0 0] [6 1 0] [-8 5 3]].
    ("cholesky.py", "[[ 2.  0.  0.]\n [ 6.  1.  0.]\n [-8.  5.  3.]]"),
    # 27 reaches 1 after 111 steps (its Collatz stopping time).
    ("collatz.py", "111"),
])
def test_a_guide_example_prints_what_the_guide_prints(file, printed):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, file)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == printed


def test_scratch_and_slice_assignment_on_jax_refs_run_eagerly():
    buf = jax.new_ref(jnp.arange(8, dtype=jnp.float32))
    example("swap_halves.py")["swap_halves"](buf)
    # The halves swapped through the 4-element scratch buffer.
    np.testing.assert_array_equal(np.asarray(buf[...]), [4, 5, 6, 7, 0, 1, 2, 3])

    copy_slices = example("copy_slices.py")["copy_slices"]

    @jax.jit
    def run(src):
        dst = jax.new_ref(jnp.full((8,), -1.0, jnp.float32))
        copy_slices(src, dst)
        return dst[...]

    # dst[:4] = src[4:8]; the rest of dst keeps its -1 (dst is inout).
    np.testing.assert_array_equal(np.asarray(run(jnp.arange(8, dtype=jnp.float32) * 10)), [40, 50, 60, 70, -1, -1, -1, -1])


def test_collectives_run_inside_shard_map_as_the_guide_calls_them():
    run_all_reduce = example("sum_across_gpus.py")["run_all_reduce"]
    # Rank 0 holds [0 1 2 3], rank 1 [4 5 6 7]: both get [4 6 8 10]; out_specs P("x") stacks them.
    np.testing.assert_array_equal(np.asarray(run_all_reduce(jnp.arange(8, dtype=jnp.float32))), [4, 6, 8, 10] * 2)
    # Run again: the same compiled function meets its devices once a run.
    np.testing.assert_array_equal(np.asarray(run_all_reduce(jnp.ones(8, jnp.float32))), [2] * 8)

    grouped = example("grouped_exchange_and_reduce.py")["grouped_exchange_and_reduce"]
    mesh = Mesh(jax.devices()[:2], ("x",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x")), check_vma=False)
    def run(a, b):
        out_a, out_b = jax.new_ref(jnp.zeros_like(a)), jax.new_ref(jnp.zeros_like(b))
        grouped(a, b, out_a, out_b)
        return out_a[...], out_b[...]

    out_a, out_b = run(jnp.arange(8, dtype=jnp.float32), 10 + jnp.arange(8, dtype=jnp.float32))
    # all_reduce: [0 1 2 3] + [4 5 6 7] on both; permute (0,1),(1,0): the shards trade places.
    np.testing.assert_array_equal(np.asarray(out_a), [4, 6, 8, 10] * 2)
    np.testing.assert_array_equal(np.asarray(out_b), [14, 15, 16, 17, 10, 11, 12, 13])


def test_mistakes_from_jax_are_raised_at_trace_time_at_the_users_line():
    init_and_copy = example("init_and_copy.py")["init_and_copy"]

    @jax.jit
    def written_plain(x):
        init_and_copy(x, x)
        return x

    with pytest.raises(TypeError, match=r"init_and_copy\.py:\d+: argument 'dst_ref' is written but was passed as a plain array: it must be passed as a Ref"):
        written_plain(jnp.arange(8, dtype=jnp.float32))

    run_ptx_add_one = example("ptx_add_one.py")["run_ptx_add_one"]
    with pytest.raises(ValueError, match=r"ptx_add_one\.py:\d+: ptx_kernel 'add_one_kernel' cannot run on thunky's cpu backend"):
        run_ptx_add_one(jnp.arange(4, dtype=jnp.float32), jax.new_ref(jnp.zeros(4, jnp.float32)))

    sum_across_gpus = example("sum_across_gpus.py")["sum_across_gpus"]
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])

    @jax.jit
    def automatic(x):
        out = jax.new_ref(jnp.zeros_like(x))
        sum_across_gpus(x, out)
        return out[...]

    with jax.set_mesh(mesh), pytest.raises(ValueError, match="runs per device, in manual mode: call it inside shard_map"):
        automatic(jnp.arange(8, dtype=jnp.float32))


def test_call_jax_lowers_the_guides_array_math_and_runs_it():
    x = np.arange(8, dtype=np.float32)
    # out = sin(x) * 2 + y, one map (f64, rounded once: within an ulp of NumPy's f32).
    pipeline = example("pipeline_call_jax.py")["pipeline"]
    out = thunky.new_ref(np.zeros(8, np.float32))
    pipeline(x, np.ones(8, np.float32), out)
    np.testing.assert_allclose(out[...], np.sin(x) * 2 + 1, rtol=1e-6)
    # a @ b into a new Ref (a gemm), then + 5.0 (a map): [[0 1 2] [3 4 5]] @ ones(3, 2) = [[3 3] [12 12]].
    mb = example("matmul_and_bias.py")["matmul_and_bias"]
    out = thunky.new_ref(np.zeros((2, 2), np.float32))
    mb(np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((3, 2), np.float32), out)
    np.testing.assert_array_equal(out[...], [[8, 8], [17, 17]])
    # helper_step doubles each half of x through its scratch: every element doubled.
    outer = example("nested_functions.py")["outer_fn"]
    buf = thunky.new_ref(x.copy())
    outer(buf)
    np.testing.assert_array_equal(buf[...], x * 2)
    # Two GEMMs straight into the halves of out (no scratch, no copy).
    tiled = example("tiled_gemm.py")["tiled_gemm"]
    a, b = np.arange(32, dtype=np.float32).reshape(8, 4), np.eye(4, dtype=np.float32) * 3
    out = thunky.new_ref(np.zeros((8, 4), np.float32))
    assert [c["op"] for c in tiled.trace(a, b, out).to_dict()["program"]] == ["gemm", "gemm"]
    tiled(a, b, out)
    np.testing.assert_array_equal(out[...], a * 3)


def test_call_jax_inside_jax_and_control_flow_gives_the_guides_results():
    run_cond = example("maybe_negate.py")["run_cond"]
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(run_cond(jnp.bool_(True), x)), [0, -1, -2, -3])
    np.testing.assert_array_equal(np.asarray(run_cond(jnp.bool_(False), x)), [0, 1, 2, 3])
    # 5 iterations: 1.5 doubled five times.
    run_loop = example("power_of_two_loop.py")["run_loop"]
    assert float(run_loop(jnp.int32(5), jnp.float32(1.5))) == 48.0
    # exp and cos on two streams, joined.
    branches = example("concurrent_branches.py")["concurrent_branches"]
    out_a, out_b = thunky.new_ref(np.zeros(4, np.float32)), thunky.new_ref(np.zeros(4, np.float32))
    v = np.linspace(0, 1, 4, dtype=np.float32)
    branches(v, v, out_a, out_b)
    np.testing.assert_allclose(out_a[...], np.exp(v), rtol=1e-6)
    np.testing.assert_allclose(out_b[...], np.cos(v), rtol=1e-6)
    # psum inside call_jax under shard_map over 2 devices: (0+4, 1+5, ...) * 2 on both.
    splice = example("splice_jax_collective.py")["splice_jax_collective"]
    mesh = Mesh(jax.devices()[:2], ("x",))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    def run(x_local):
        out = jax.new_ref(jnp.zeros_like(x_local))
        splice(x_local, out)
        return out[...]

    np.testing.assert_array_equal(np.asarray(run(jnp.arange(8, dtype=jnp.float32))), [8, 12, 16, 20] * 2)


def test_what_call_jax_does_not_lower_is_predicted_and_refused_by_execute():
    def cumulative(x_ref, out_ref):
        out_ref[...] = jnp.cumsum(x_ref[...])

    @thunky.jit
    def scan(x_ref, out_ref):
        thunky.call_jax(cumulative, x_ref, out_ref)

    args = (np.arange(8, dtype=np.float32), thunky.new_ref(np.zeros(8, np.float32)))
    doc = scan.trace(*args).to_dict()
    # One opaque kernel, named for its primitive (jnp.cumsum's, inside its
    # own jit, so its result is copied out), with XLA's cost analysis of it:
    # at least the 8 f32 read and written.
    kernel = doc["program"][0]
    assert [c["op"] for c in doc["program"]] == ["kernel", "copy"]
    assert (kernel["name"], kernel["reads"]) == ("cumsum", ["x_ref"])
    assert kernel["cost"]["bytes"] >= 64 and kernel["cost"]["flops"] >= 1
    assert scan.simulate(*args).makespan_s > 0
    with pytest.raises(ValueError, match=r"test_guide_examples\.py:\d+: call_jax: cumsum is not lowered \(cumsum; instead: a GEMM with a "
                                         r"triangular matrix of ones"):
        scan.execute(*args)


def test_the_guides_ring_collective_matmul_runs_from_jax_and_is_the_bundled_schedule(monkeypatch):
    from thunky import _tools
    programs = []
    execute = _tools.execute
    monkeypatch.setattr(_tools, "execute", lambda program, **k: programs.append(program) or execute(program, **k))
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    ring = example("ring_collective_matmul.py")["make_ring_collective_matmul"](mesh, 64, 128, 64, jnp.float32)
    a = jax.random.normal(jax.random.PRNGKey(0), (256, 128), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (128, 256), jnp.float32)
    # C = AllGather(A) x B, each device's column block: as one f32 GEMM, within
    # K eps |A||B| (128 x 1.2e-7 x ~4 x ~4 = 2.4e-4).
    np.testing.assert_allclose(np.asarray(ring(a, b)), np.asarray(a) @ np.asarray(b), atol=3e-4)
    # dev_id (jax.lax.axis_index("x") on each device) is read as the axis:
    # GEMM s writes c_out[ds(((x - s) % 4) * 64, 64)] directly, as the
    # bundled schedule does, with the same shifts, tokens and GEMMs.
    doc = programs[-1].to_dict()
    bundled = json.load(open(os.path.join(REPO, "examples", "ring_collective_matmul_n4.json")))
    assert ops(doc["program"], {}) == ops(bundled["program"], {})
    assert [c["c"] for c in doc["program"] if c["op"] == "gemm"][1] == "c_out_buf[ds((((x - 1) % 4) * 64), 64)]"
    predicted = _tools.simulate(programs[-1], machine="h100-8gpu").makespan_s
    r = subprocess.run([thunky.find_tool("thunky-sim"), os.path.join(REPO, "examples", "ring_collective_matmul_n4.json"), "--machine",
                        "h100-8gpu"], capture_output=True, text=True)
    assert f"{predicted * 1e6:.3f}" in r.stdout  # the table prints the makespan in us with three decimals


def test_the_guides_bidirectional_ring_races_at_four_devices_and_thunky_says_where():
    # Its two pair buffers: shift 3 writes the one GEMM 1 still reads (the
    # bundled bidirectional_ring_collective_matmul_n4_literal.json races alike).
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    bidir = example("bidirectional_ring_collective_matmul.py")["make_bidirectional_ring_collective_matmul"](mesh, 64, 128, 64, jnp.float32)
    with pytest.raises(Exception, match=r"bidirectional_ring_collective_matmul\.py:\d+: missing join: add an async_done of token '\w+' on computation:0 before /program/\d+; race on buffer 'pair_bufs"):
        np.asarray(bidir(jnp.ones((256, 128), jnp.float32), jnp.ones((128, 256), jnp.float32)))


def test_call_jax_lowers_lax_cond_while_and_iota_to_thunkys_own():
    def f(x_ref, n_ref, out_ref):
        x = x_ref[...]
        y = jax.lax.cond(x[0] > 0, lambda v: v * 2, lambda v: v - 1, x)
        i, z = jax.lax.while_loop(lambda s: s[0] < n_ref[...], lambda s: (s[0] + 1, s[1] * 2 + jnp.arange(4, dtype=jnp.float32)), (0, y))
        out_ref[...] = z

    @thunky.jit
    def prog(x_ref, n_ref, out_ref):
        thunky.call_jax(f, x_ref, n_ref, out_ref)

    out = thunky.new_ref(np.zeros(4, np.float32))
    doc = prog.trace(np.ones(4, np.float32), np.int32(3), out).to_dict()
    assert [c["op"] for c in doc["program"]] == ["map", "switch", "map", "copy", "while", "copy"]
    for x0, want in ((1.0, None), (-1.0, None)):
        prog(np.full(4, x0, np.float32), np.int32(3), out)
        # cond: x0 > 0 doubles, else subtracts 1; then three times z = 2 z + [0 1 2 3]:
        # z3 = 8 y + 7 [0 1 2 3] (1 + 2 + 4 of the iota).
        y = 2 * x0 if x0 > 0 else x0 - 1
        np.testing.assert_array_equal(out[...], 8 * y + 7 * np.arange(4))


def test_call_jax_transposes_with_thunkys_transpose():
    @thunky.jit
    def f(x_ref, out_ref):
        thunky.call_jax(lambda x, o: o.__setitem__(Ellipsis, jnp.transpose(x[...], (1, 0)) + 1), x_ref, out_ref)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = thunky.new_ref(np.zeros((3, 2), np.float32))
    assert [c["op"] for c in f.trace(x, out).to_dict()["program"]] == ["transpose", "map"]
    f(x, out)
    np.testing.assert_array_equal(out[...], x.T + 1)


def test_call_jax_adds_a_bias_row_as_one_broadcasting_map():
    # x [2, 3] + b [3] (jnp reshapes b to [1, 3], a view, then inserts
    # broadcast_in_dim [1, 3] -> [2, 3]): one map whose input b broadcasts,
    # not a copy of b per row.
    @thunky.jit
    def f(x_ref, b_ref, out_ref):
        thunky.call_jax(lambda x, b, o: o.__setitem__(Ellipsis, x[...] * 2 + b[...]), x_ref, b_ref, out_ref)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], np.float32)
    out = thunky.new_ref(np.zeros((2, 3), np.float32))
    program = f.trace(x, b, out).to_dict()["program"]
    assert [c["op"] for c in program] == ["map"]
    assert sorted(program[0]["in"].values()) == ["b_ref.reshape(1, 3)", "x_ref"]
    f(x, b, out)
    # Row 0: 0 2 4 + 10 20 30 = 10 22 34; row 1: 6 8 10 + 10 20 30 = 16 28 40.
    np.testing.assert_array_equal(out[...], [[10, 22, 34], [16, 28, 40]])


def test_call_jax_subtracts_a_keepdims_row_max_through_a_reshaped_view():
    # The softmax shift x - max(x, axis=1, keepdims=True): the reduce writes
    # m [2]; keepdims reads it as m.reshape(2, 1), a view, which then
    # broadcasts per row in the one map (no copy of m, no per-row loop).
    @thunky.jit
    def f(x_ref, out_ref):
        thunky.call_jax(lambda x, o: o.__setitem__(Ellipsis, x[...] - jnp.max(x[...], axis=1, keepdims=True)), x_ref, out_ref)

    x = np.array([[1, 5, 2], [7, 3, 4]], np.float32)
    out = thunky.new_ref(np.zeros((2, 3), np.float32))
    program = f.trace(x, out).to_dict()["program"]
    assert [c["op"] for c in program] == ["reduce", "map"]
    assert any(r.endswith(".reshape(2, 1)") for r in program[1]["in"].values()), program[1]
    f(x, out)
    # Row maxima 5 and 7: 1-5 5-5 2-5 = -4 0 -3; 7-7 3-7 4-7 = 0 -4 -3.
    np.testing.assert_array_equal(out[...], [[-4, 0, -3], [0, -4, -3]])


def test_call_jax_broadcasts_a_column_inserted_by_none_indexing():
    # x / s[:, None]: broadcast_in_dim [2] -> [2, 3] on dimension 0 reads s
    # as s.reshape(2, 1). Row 0: 2 4 6 / 2 = 1 2 3; row 1: 3 6 9 / 3 = 1 2 3.
    @thunky.jit
    def f(x_ref, s_ref, out_ref):
        thunky.call_jax(lambda x, s, o: o.__setitem__(Ellipsis, x[...] / s[...][:, None]), x_ref, s_ref, out_ref)

    x = np.array([[2, 4, 6], [3, 6, 9]], np.float32)
    s = np.array([2, 3], np.float32)
    out = thunky.new_ref(np.zeros((2, 3), np.float32))
    assert [c["op"] for c in f.trace(x, s, out).to_dict()["program"]] == ["map"]
    f(x, s, out)
    np.testing.assert_array_equal(out[...], [[1, 2, 3], [1, 2, 3]])


def test_a_ref_reshapes_as_a_view():
    @thunky.jit
    def f(a_ref, out_ref):
        out_ref[...] = a_ref.reshape(3, -1).at[1][...]

    a = np.arange(6, dtype=np.float32)
    out = thunky.new_ref(np.zeros(2, np.float32))
    program = f.trace(a, out).to_dict()["program"]
    assert program[0]["src"] == "a_ref.reshape(3, 2)[1]"
    f(a, out)
    np.testing.assert_array_equal(out[...], [2, 3])  # row 1 of 0 1 / 2 3 / 4 5
    # 6 elements are not 4 x 2; chained reshapes write the last one only.
    with pytest.raises(ValueError, match=r"cannot reshape \(6,\)"):
        thunky.new_ref(a).reshape(4, 2)
    assert thunky.new_ref(a).reshape(2, 3).reshape(3, 2).shape == (3, 2)


def test_a_ref_bitcasts_as_a_view_of_the_same_bytes():
    import ml_dtypes
    jnp = jax.numpy

    @thunky.jit
    def f(x_ref, bits_ref, halves_ref, y_ref):
        bits_ref[...] = x_ref.bitcast(jnp.int32)[...]
        thunky.call_jax(lambda h, o: o.__setitem__(Ellipsis, h[...].astype(jnp.float32)), x_ref.at[1].bitcast(jnp.bfloat16), halves_ref)
        y_ref.bitcast(jnp.int32)[...] = bits_ref[...]  # writes all of y: y is an output

    x = np.array([[1, -2], [0.5, 3]], np.float32)
    bits = thunky.new_ref(np.zeros((2, 2), np.int32))
    halves, y = thunky.new_ref(np.zeros(4, np.float32)), thunky.new_ref(np.zeros((2, 2), np.float32))
    program = f.trace(x, bits, halves, y).to_dict()["program"]
    assert program[0]["src"] == "x_ref.bitcast(s32)"
    assert program[-1]["dst"] == "y_ref.bitcast(s32)"
    f(x, bits, halves, y)
    # The same bytes as NumPy's view: 1.0 is 0x3F800000 = 1065353216; row 1
    # as bf16 is the halves of 0.5 and 3.0, low first: 0, 0.5, 0, 3.
    np.testing.assert_array_equal(bits[...], x.view(np.int32))
    assert bits[...][0, 0] == 1065353216
    np.testing.assert_array_equal(halves[...], x[1].view(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(halves[...], [0, 0.5, 0, 3])
    np.testing.assert_array_equal(y[...], x)
    # A wider type needs whole elements: 3 f32 are not whole f64s, and a
    # view that starts at f32 element 1 is not on an f64.
    with pytest.raises(ValueError, match="not a whole number of 8-byte elements"):
        thunky.new_ref(np.zeros(3, np.float32)).bitcast(np.float64)
    with pytest.raises(ValueError, match="not on a whole 8-byte element"):
        thunky.new_ref(np.zeros(4, np.float32)).at[1:3].bitcast(np.float64)
    with pytest.raises(TypeError, match="no dtype for complex64"):
        thunky.new_ref(np.zeros(4, np.float32)).bitcast(np.complex64)
    assert thunky.new_ref(np.zeros((2, 4), np.float32)).bitcast(np.uint8).shape == (2, 16)


def test_call_jax_reads_upstreams_ref_transforms_as_views():
    jnp = jax.numpy

    # Inside fn, a JAX Ref's .bitcast (same size) and .reshape are views too.
    @thunky.jit
    def f(x_ref, o_ref, c_ref):
        def fn(x, o, c):
            o[...] = x.bitcast(jnp.int32)[...] + 1
            c[...] = x.reshape(2, 1)[...] * 2
        thunky.call_jax(fn, x_ref, o_ref, c_ref)

    x = np.array([[1, 2]], np.float32)
    o, c = thunky.new_ref(np.zeros((1, 2), np.int32)), thunky.new_ref(np.zeros((2, 1), np.float32))
    program = f.trace(x, o, c).to_dict()["program"]
    assert [list(c["in"].values()) for c in program] == [["x_ref.bitcast(s32)"], ["x_ref.reshape(2, 1)"]], program
    f(x, o, c)
    np.testing.assert_array_equal(o[...], x.view(np.int32) + 1)  # 1.0's bits 1065353216, + 1
    np.testing.assert_array_equal(c[...], [[2], [4]])

    # A bitcast that changes the size inside fn has JAX's TPU shape: it stays
    # an opaque kernel, which execute refuses with the reason.
    @thunky.jit
    def g(x_ref, o_ref):
        thunky.call_jax(lambda x, o: o.__setitem__(Ellipsis, x.bitcast(jnp.bfloat16)[...].astype(jnp.float32)), x_ref, o_ref)

    with pytest.raises(ValueError, match="bitcast of float32 to bfloat16 inside call_jax"):
        g(np.ones((2, 2), np.float32), thunky.new_ref(np.zeros((4, 2), np.float32)))


def test_call_jax_lowers_a_scan_over_carries_and_fori_loop_with_static_bounds_to_a_while():
    def f(x_ref, n_ref, out_ref, count_ref):
        x = x_ref[...]
        # fori_loop with Python bounds is a scan whose carries are (i, v).
        v = jax.lax.fori_loop(0, 5, lambda i, v: v * 2 + i, x)
        # A scan over carries alone: 4 Collatz steps of n, counting the odd ones.
        def collatz(c, _):
            n, odd = c
            return (jnp.where(n % 2 == 0, n // 2, 3 * n + 1), odd + n % 2), None
        (n, odd), _ = jax.lax.scan(collatz, (n_ref[...], jnp.int32(0)), length=4)
        out_ref[...] = v
        count_ref[0] = n
        count_ref[1] = odd

    @thunky.jit
    def prog(x_ref, n_ref, out_ref, count_ref):
        thunky.call_jax(f, x_ref, n_ref, out_ref, count_ref)

    x = np.arange(3, dtype=np.float32)
    out, count = thunky.new_ref(np.zeros(3, np.float32)), thunky.new_ref(np.zeros(2, np.int32))
    doc = prog.trace(x, np.int32(7), out, count).to_dict()
    assert [c["op"] for c in doc["program"]].count("while") == 2
    prog(x, np.int32(7), out, count)
    # v_{i+1} = 2 v_i + i from v_0 = x, 5 steps: 32 x + (2^3·1 + 2^2·2 + 2·3 + 4) =
    # 32 x + 26, so [26, 58, 90]; 7 -> 22 -> 11 -> 34 -> 17 (odd at 7 and 11: 2).
    np.testing.assert_array_equal(out[...], [26, 58, 90])
    np.testing.assert_array_equal(count[...], [17, 2])
    # The same as JAX's own.
    jax_out, jax_count = thunky.new_ref(np.zeros(3, np.float32)), thunky.new_ref(np.zeros(2, np.int32))
    xr, nr, orf, crf = jax.new_ref(jnp.asarray(x)), jax.new_ref(jnp.int32(7)), jax.new_ref(jnp.zeros(3)), jax.new_ref(jnp.zeros(2, jnp.int32))
    f(xr, nr, orf, crf)
    np.testing.assert_array_equal(out[...], np.asarray(orf[...]))
    np.testing.assert_array_equal(count[...], np.asarray(crf[...]))


def test_a_scan_over_arrays_reads_xs_and_writes_ys_by_its_step_as_jax():
    def forward(x_ref, out_ref, last_ref):
        c, ys = jax.lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(3, jnp.float32), x_ref[...])
        out_ref[...], last_ref[...] = ys, c

    def backward(x_ref, out_ref, last_ref):
        c, ys = jax.lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(3, jnp.float32), x_ref[...], reverse=True)
        out_ref[...], last_ref[...] = ys, c

    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    for fn in (forward, backward):
        @thunky.jit
        def prog(x_ref, out_ref, last_ref):
            thunky.call_jax(fn, x_ref, out_ref, last_ref)

        out, last = thunky.new_ref(np.zeros((5, 3), np.float32)), thunky.new_ref(np.zeros(3, np.float32))
        prog(x, out, last)
        # ys[t] = (x[0] + ... + x[t-1]) * x[t] (forward; backward sums the rows after t);
        # the last carry is every row's sum: [30, 35, 40].
        sums = np.cumsum(x, axis=0) - x if fn is forward else np.cumsum(x[::-1], axis=0)[::-1] - x
        np.testing.assert_array_equal(out[...], sums * x)
        np.testing.assert_array_equal(last[...], [30, 35, 40])
        jo, jl = jax.new_ref(jnp.zeros((5, 3))), jax.new_ref(jnp.zeros(3))
        fn(jax.new_ref(jnp.asarray(x)), jo, jl)
        np.testing.assert_array_equal(out[...], np.asarray(jo[...]))


def test_loads_and_stores_at_offsets_computed_on_the_device_are_switches_over_the_offsets():
    from jax.experimental import pallas as pl

    def f(x_ref, i_ref, row_ref, out_ref, arr_ref):
        i = i_ref[...]
        row_ref[...] = x_ref[i]                       # a Ref loaded at row i
        out_ref[...] = jnp.zeros((4, 3), jnp.float32)
        out_ref[pl.ds(i, 1)] = x_ref[0:1] * 2          # a Ref stored at row i
        x = x_ref[...]
        # Arrays: dynamic_slice of 2 rows from i + 1, dynamic_update_slice at
        # row i * 2; JAX clamps each start so that the slice fits.
        arr_ref[...] = jax.lax.dynamic_update_slice(x, jax.lax.dynamic_slice(x, (i + 1, 0), (2, 3)) + 100, (i * 2, 0))

    @thunky.jit
    def prog(x_ref, i_ref, row_ref, out_ref, arr_ref):
        thunky.call_jax(f, x_ref, i_ref, row_ref, out_ref, arr_ref)

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    refs = lambda: [thunky.new_ref(np.zeros(s, np.float32)) for s in ((3,), (4, 3), (4, 3))]
    doc = prog.trace(x, np.int32(1), *refs()).to_dict()
    # Row i of 4 for the Ref load and store, start i + 1 of 3 (4 - 2 + 1) and i * 2 of 3 for the arrays.
    assert [len(c["branches"]) for c in doc["program"] if c["op"] == "switch"] == [4, 4, 3, 3]
    for i in (0, 1, 3):
        row, out, arr = refs()
        prog(x, np.int32(i), row, out, arr)
        # Row i of x; x's row 0 doubled at row i; the 2 rows from min(i + 1, 2),
        # plus 100, written from row min(2 i, 2).
        np.testing.assert_array_equal(row[...], x[i])
        want_out = np.zeros((4, 3), np.float32)
        want_out[i] = 2 * x[0]
        np.testing.assert_array_equal(out[...], want_out)
        want_arr = x.copy()
        s, d = min(i + 1, 2), min(2 * i, 2)
        want_arr[d:d + 2] = x[s:s + 2] + 100
        np.testing.assert_array_equal(arr[...], want_arr)
        # The same as JAX's own.
        j = [jax.new_ref(jnp.zeros(r.shape, jnp.float32)) for r in (row, out, arr)]
        jax.jit(f)(jax.new_ref(jnp.asarray(x)), jax.new_ref(jnp.int32(i)), *j)
        for got, jr in zip((row, out, arr), j):
            np.testing.assert_array_equal(got[...], np.asarray(jr[...]))


def test_a_load_at_one_of_more_than_1024_device_offsets_is_predicted_and_refused_by_execute():
    def pick(x_ref, i_ref, out_ref):
        out_ref[...] = x_ref[i_ref[...]]

    @thunky.jit
    def prog(x_ref, i_ref, out_ref):
        thunky.call_jax(pick, x_ref, i_ref, out_ref)

    args = (np.zeros((2000, 2), np.float32), np.int32(5), thunky.new_ref(np.zeros(2, np.float32)))
    assert prog.simulate(*args).makespan_s > 0
    with pytest.raises(ValueError, match=r"test_guide_examples\.py:\d+: call_jax: get is not lowered \(a load or store at one of 2000 offsets"):
        prog.execute(*args)


# Each primitive call_jax lowers, on random shapes and values, against JAX
# under jax.jit on this CPU: integers exactly, f32 within 1e-5 relative (a
# map computes in f64 and rounds once; JAX rounds each f32 step).
_PRIMITIVES = [
    ("exp", lambda x: jnp.exp(x)), ("log", lambda x: jnp.log(jnp.abs(x) + 1)), ("tanh", jnp.tanh),
    ("logistic", jax.nn.sigmoid), ("sin", jnp.sin), ("cos", jnp.cos), ("sqrt", lambda x: jnp.sqrt(jnp.abs(x))),
    ("rsqrt", lambda x: jax.lax.rsqrt(jnp.abs(x) + 1)), ("abs", jnp.abs), ("neg", lambda x: -x), ("floor", jnp.floor),
    ("ceil", jnp.ceil), ("round", jnp.round), ("max", lambda x: jnp.maximum(x, 0.5)), ("min", lambda x: jnp.minimum(x, x * x)),
    ("pow", lambda x: jnp.power(jnp.abs(x) + 1, x)), ("integer_pow", lambda x: x ** 3),
    ("select_n", lambda x: jnp.where(x > 0, x, 2 * x)), ("reduce_sum", lambda x: jnp.sum(x, axis=1)),
    ("reduce_max", lambda x: jnp.max(x, axis=0)), ("reduce_min", lambda x: jnp.min(x, axis=1)),
    ("argmax", lambda x: jnp.argmax(x, axis=1)), ("argmin", lambda x: jnp.argmin(x, axis=0)),
    ("argmax_flat", lambda x: jnp.argmax(x)), ("transpose", lambda x: x.T * 1),
    ("dot_general", lambda x: x @ x.T), ("convert_element_type", lambda x: (x * 10).astype(jnp.int32)),
    ("div_rem", lambda x: (x * 10).astype(jnp.int32) // 3 + (x * 10).astype(jnp.int32) % 3),
    # Common JAX that lowered to opaque kernels: exact GELU, autodiff's add_any, lax.platform_dependent.
    ("erf", jax.lax.erf), ("erfc", jax.lax.erfc), ("erf_inv", lambda x: jax.lax.erf_inv(jnp.tanh(x) * 0.999)),
    ("gelu_exact", lambda x: jax.nn.gelu(x, approximate=False)),
    ("add_any", lambda x: jax.vjp(lambda y: y * y + jnp.sin(y), x)[1](jnp.ones_like(x))[0]),
    ("platform_index", lambda x: jax.lax.platform_dependent(x, cpu=lambda v: v * 2, default=lambda v: v * 3)),
]


@pytest.mark.parametrize("name,fn", _PRIMITIVES, ids=[p[0] for p in _PRIMITIVES])
def test_each_lowered_primitive_agrees_with_jax_on_random_shapes(name, fn):
    rng = np.random.default_rng(sum(map(ord, name)))
    shape = tuple(int(n) for n in rng.integers(1, 9, size=2))
    x = rng.standard_normal(shape).astype(np.float32)
    want = np.asarray(jax.jit(fn)(x))

    @thunky.jit
    def prog(x_ref, out_ref):
        thunky.call_jax(lambda a, o: o.__setitem__(Ellipsis, fn(a[...])), x_ref, out_ref)

    out = thunky.new_ref(np.zeros(want.shape, want.dtype))
    doc = prog.trace(x, out).to_dict()
    assert "kernel" not in [c["op"] for c in doc["program"]], doc["program"]  # lowered, not opaque
    prog(x, out)
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(out[...], want)
    else:
        np.testing.assert_allclose(out[...], want, rtol=1e-5, atol=1e-6)


def test_argmax_and_argmin_give_the_first_nan_as_jax():
    x = np.array([[3, 7, 7, 1], [2, np.nan, 0, np.nan]], np.float32)

    @thunky.jit
    def prog(x_ref, hi_ref, lo_ref):
        thunky.call_jax(lambda a, hi, lo: (hi.__setitem__(Ellipsis, jnp.argmax(a[...], axis=1)),
                                           lo.__setitem__(Ellipsis, jnp.argmin(a[...], axis=1))), x_ref, hi_ref, lo_ref)

    hi, lo = thunky.new_ref(np.zeros(2, np.int32)), thunky.new_ref(np.zeros(2, np.int32))
    prog(x, hi, lo)
    # Row 0: the first 7 (1) and the 1 (3); row 1: the first NaN (1) for both.
    np.testing.assert_array_equal(hi[...], [1, 1])
    np.testing.assert_array_equal(lo[...], [3, 1])
    np.testing.assert_array_equal(hi[...], np.asarray(jnp.argmax(x, axis=1)))
    np.testing.assert_array_equal(lo[...], np.asarray(jnp.argmin(x, axis=1)))


def test_a_two_layer_mlp_forward_and_backward_lowers_to_the_commands_counted_by_hand():
    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    def step(x, w1, w2, dy, y, dx, dw1, dw2):
        out, vjp = jax.vjp(mlp, x[...], w1[...], w2[...])
        gx, gw1, gw2 = vjp(dy[...])
        y[...], dx[...], dw1[...], dw2[...] = out, gx, gw1, gw2

    @thunky.jit
    def prog(x, w1, w2, dy, y, dx, dw1, dw2):
        thunky.call_jax(step, x, w1, w2, dy, y, dx, dw1, dw2)

    rng = np.random.default_rng(7)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 4)))
    dy = rng.standard_normal((8, 4)).astype(np.float32)
    outs = [thunky.new_ref(np.zeros(s, np.float32)) for s in ((8, 4), (8, 16), (16, 32), (32, 4))]
    doc = prog.trace(x, w1, w2, dy, *outs).to_dict()
    ops = [c["op"] for c in doc["program"]]
    # By hand: forward a = x w1 (gemm), h = tanh(a) (map), y = h w2 (gemm); backward dw2 = h^T dy and
    # dh = dy w2^T (gemms, the transposes as their flags), da = dh * (1 - h^2) (one map, tanh not computed
    # again), dw1 = x^T da and dx = da w1^T (gemms): 6 gemms and 2 maps, nothing else.
    assert sorted(ops) == ["gemm"] * 6 + ["map"] * 2, ops
    prog(x, w1, w2, dy, *outs)
    want = jax.vjp(mlp, x, w1, w2)
    grads = want[1](dy)
    for got, w in zip(outs, [want[0], *grads]):
        np.testing.assert_allclose(got[...], np.asarray(w), rtol=1e-4, atol=1e-5)


def test_jnp_diagonal_takes_the_cpu_branch_of_platform_dependent_and_is_predicted():
    # jnp.diagonal is lax.platform_dependent over ('mosaic',) and a default
    # (None): the default branch, a gather, is what the CPU runs. It is
    # predicted as opaque kernels and refused by execute with what to write instead.
    @thunky.jit
    def diag(x_ref, o_ref):
        thunky.call_jax(lambda x, o: o.__setitem__(Ellipsis, jnp.diagonal(x[...])), x_ref, o_ref)

    args = (np.eye(4, dtype=np.float32), thunky.new_ref(np.zeros(4, np.float32)))
    doc = diag.trace(*args).to_dict()
    assert "gather" in [c.get("name") for c in doc["program"] if c["op"] == "kernel"]
    assert diag.simulate(*args).makespan_s > 0
    with pytest.raises(ValueError, match=r"call_jax: \w+ is not lowered .*instead: "):
        diag.execute(*args)


@pytest.mark.parametrize("name,fn", [
    ("arange_index", lambda x: x[jnp.arange(2, 6)]),
    ("take", lambda x: jnp.take(x, jnp.arange(1, 4), axis=0)),
    ("negative_arange", lambda x: x[jnp.arange(-4, -1)]),  # jnp wraps negatives: rows 4, 5, 6
])
def test_a_gather_of_a_run_of_rows_at_iota_indices_is_a_view(name, fn):
    # iota and jnp's index arithmetic (wrap, clamp) fold when traced; the
    # gather of rows start..start+n-1 is the view x[start:start + n]: one
    # copy into the output, no kernel.
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    want = np.asarray(jax.jit(fn)(x))

    @thunky.jit
    def prog(x_ref, o_ref):
        thunky.call_jax(lambda a, o: o.__setitem__(Ellipsis, fn(a[...])), x_ref, o_ref)

    out = thunky.new_ref(np.zeros(want.shape, want.dtype))
    doc = prog.trace(x, out).to_dict()
    assert [c["op"] for c in doc["program"]] == ["copy"], doc["program"]
    assert list(doc["buffers"]) == ["x_ref", "o_ref"]  # no constant buffer of indices left behind
    prog(x, out)
    np.testing.assert_array_equal(out[...], want)


def test_index_arithmetic_folds_inside_an_outer_jax_jit():
    # x[jnp.arange(2, 6)] in a call_jax function of a thunky.jit called from
    # jax.jit: the iota folds eagerly even with JAX's trace active, so the
    # gather is still the view x[2:6] (rows 2..5 of an 8x3 iota).
    fn = lambda x: x[jnp.arange(2, 6)]

    @thunky.jit
    def prog(x_ref, o_ref):
        thunky.call_jax(lambda a, o: o.__setitem__(Ellipsis, fn(a[...])), x_ref, o_ref)

    @jax.jit
    def run(x):
        o = jax.new_ref(jnp.zeros((4, 3), jnp.float32))
        prog(x, o)
        return o[...]

    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    np.testing.assert_array_equal(np.asarray(run(x)), x[2:6])
