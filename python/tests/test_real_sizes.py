"""Python at the sizes and dtypes users run: every dtype kept bit for bit,
shapes alone enough to predict, decisions on values not given refused at
the user's line, shard_map at any shard size, and the small conveniences
(check, name=, compare of Results, a cold run warned of)."""

import inspect
import os
import shutil
import subprocess
import tracemalloc
import warnings

import ml_dtypes
import numpy as np
import pytest

import thunky

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


@thunky.jit
def copy_all(src_ref, dst_ref):
    thunky.copy(src_ref, dst_ref, name="the_copy")


def _edges(dtype):
    """Edge values of each dtype: NaN, +-inf, +-0, the smallest subnormal,
    the largest finite, the extremes of integers."""
    d = np.dtype(dtype)
    if d == np.bool_:
        return np.array([True, False, True, True], d)
    if d.kind in "iu":
        info = np.iinfo(d)
        return np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], d)
    info = ml_dtypes.finfo(d) if d.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else np.finfo(d)
    vals = [0.0, -0.0, float(info.max), -float(info.max), float(info.smallest_subnormal), -float(info.smallest_subnormal),
            float(info.smallest_normal), 1.5, -2.25, 3.0, 0.1, np.nan]
    if d.name != "float8_e4m3fn":  # the "fn" variant has no infinities
        vals += [np.inf, -np.inf]
    return np.array(vals, np.float64).astype(d)


DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.int64, np.int32,
          np.int16, np.int8, np.uint32, np.uint8, np.bool_]


def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
def test_every_dtype_goes_through_execute_and_back_bit_for_bit(dtype):
    x = _edges(dtype)
    out = thunky.new_ref(np.zeros_like(x))
    r = copy_all.execute(x, out)
    got = r.outputs[0]
    assert got.dtype == x.dtype
    if x.dtype.kind == "f" or x.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        nan = np.isnan(x.astype(np.float64))
        # NaN stays NaN (its payload aside); every other element keeps its bits: -0 stays -0, subnormals and extremes stay.
        np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan)
        np.testing.assert_array_equal(_bits(got)[~nan], _bits(x)[~nan])
    else:
        # int64's extremes are past 2^53: through a double they would come back rounded.
        np.testing.assert_array_equal(_bits(got), _bits(x))


def test_bf16_values_are_not_truncated_to_integers():
    x = np.array([1.5, -2.25, 3, 0.1], ml_dtypes.bfloat16)
    out = thunky.new_ref(np.zeros_like(x))
    copy_all.execute(x, out)
    # 0.1 in bf16 is 0.10009765625 (0x3dcd); 1.5 and -2.25 are exact: nothing rounds to [1, -2, 3, 0].
    np.testing.assert_array_equal(out[...].astype(np.float64), [1.5, -2.25, 3.0, 0.10009765625])


def test_a_bf16_matmul_agrees_with_numpy_in_f32_to_bf16_precision():
    jnp = pytest.importorskip("jax.numpy")

    @thunky.jit
    def mm(a_ref, b_ref, c_ref):
        thunky.call_jax(lambda a, b, c: c.__setitem__(Ellipsis, jnp.dot(a[...], b[...], preferred_element_type=jnp.float32)),
                        a_ref, b_ref, c_ref)

    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, 8)).astype(ml_dtypes.bfloat16)
    c = thunky.new_ref(np.zeros((16, 8), np.float32))
    mm.execute(a, b, c)
    want = a.astype(np.float32) @ b.astype(np.float32)
    # The bf16 inputs are exact in f32, so the products are too: only the sum's order differs (relative 1e-5).
    np.testing.assert_allclose(c[...], want, rtol=1e-5, atol=1e-5)


def test_arguments_travel_as_npy_files_never_as_json_lists():
    x = np.arange(6, dtype=ml_dtypes.bfloat16)
    doc = copy_all.trace(x, thunky.new_ref(np.zeros_like(x))).to_dict()
    assert doc["buffers"]["src_ref"]["init"] == {"kind": "npy", "path": "src_ref.npy", "dtype": "bf16"}


# ---- shapes alone

@thunky.jit
def gemm_layer(x_ref, w_ref, y_ref):
    thunky.call_jax(lambda x, w, y: y.__setitem__(Ellipsis, x[...] @ w[...]), x_ref, w_ref, y_ref)


def test_shapes_alone_predict_what_arrays_predict():
    jax = pytest.importorskip("jax")
    x, w = np.ones((256, 512), np.float32), np.ones((512, 128), np.float32)
    y = thunky.new_ref(np.zeros((256, 128), np.float32))
    with_arrays = gemm_layer.simulate(x, w, y).makespan_s
    shapes = [thunky.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype), thunky.ShapeDtypeStruct((256, 128), np.float32)]
    # A GEMM's time depends on its shapes and dtype alone: the same figure, to the last bit.
    assert gemm_layer.simulate(*shapes).makespan_s == with_arrays


class _Shaped:
    """Anything with .shape and .dtype."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


def test_two_gigabytes_of_shapes_are_predicted_without_allocating_them():
    # x is 16384 x 32768 bf16 = 1 GiB, w 32768 x 16384 bf16 = 1 GiB: 2 GiB of arguments.
    args = (_Shaped((16384, 32768), ml_dtypes.bfloat16), _Shaped((32768, 16384), ml_dtypes.bfloat16), _Shaped((16384, 16384), ml_dtypes.bfloat16))
    tracemalloc.start()
    report = gemm_layer.simulate(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # Nothing of their size is allocated in Python: well under 64 MB, where one of them alone is 1 GiB.
    assert peak < 64 << 20, peak
    # 2 * 16384 * 32768 * 16384 flops = 1.76e13 on an H100 (about 1e15 bf16 flop/s dense): milliseconds, not nothing.
    assert 5e-3 < report.makespan_s < 0.2


def test_shape_only_inputs_start_as_fill_says():
    @thunky.jit
    def keep(x_ref, y_ref):
        thunky.copy(x_ref, y_ref)

    y = thunky.new_ref(np.full(4, -1, np.float32))
    doc = keep.trace(thunky.ShapeDtypeStruct((4,), np.float32), y, fill="uniform").to_dict()
    assert doc["buffers"]["x_ref"]["init"] == {"kind": "uniform", "seed": 0}
    r = keep.execute(thunky.ShapeDtypeStruct((4,), np.float32), y)
    np.testing.assert_array_equal(r.outputs[0], [0, 0, 0, 0])  # zeros, the default fill
    r = keep.execute(thunky.ShapeDtypeStruct((4,), np.float32), y, fill="uniform")
    assert np.all((r.outputs[0] >= 0) & (r.outputs[0] < 1)) and len(set(r.outputs[0].tolist())) == 4
    with pytest.raises(ValueError, match="fill is one of zeros, ones, uniform, normal"):
        keep.trace(thunky.ShapeDtypeStruct((4,), np.float32), y, fill="random")


@thunky.jit(scratch_shapes=[thunky.ShapeDtypeStruct((), np.bool_)])
def maybe_copy(x_ref, y_ref, p_ref):
    thunky.call_jax(lambda x, p: p.__setitem__(Ellipsis, x[0] > 0), x_ref, p_ref)
    thunky.cond(p_ref, lambda: thunky.copy(x_ref, y_ref))


LINE_OF_COND = inspect.getsourcelines(maybe_copy.fn)[1] + 3


def test_a_decision_on_values_not_given_names_the_users_line_and_the_fix():
    pytest.importorskip("jax")
    y = thunky.new_ref(np.zeros(4, np.float32))
    with pytest.raises(ValueError) as e:
        maybe_copy.simulate(thunky.ShapeDtypeStruct((4,), np.float32), y)
    msg = str(e.value)
    assert msg.startswith(f"{__file__}:{LINE_OF_COND}: this cond decides on values computed from argument 'x_ref'"), msg
    assert "thunky.cond(..., taken=True)" in msg
    # With the values, the simulator decides it by running the schedule.
    assert maybe_copy.simulate(np.ones(4, np.float32), y).makespan_s > 0


def test_sim_hints_decide_without_values():
    pytest.importorskip("jax")

    @thunky.jit(scratch_shapes=[thunky.ShapeDtypeStruct((), np.bool_), thunky.ShapeDtypeStruct((), np.int32)])
    def hinted(x_ref, y_ref, p_ref, i_ref):
        thunky.call_jax(lambda x, p, i: (p.__setitem__(Ellipsis, x[0] > 0), i.__setitem__(Ellipsis, x[1].astype("int32"))),
                        x_ref, p_ref, i_ref)
        thunky.cond(p_ref, lambda: thunky.copy(x_ref, y_ref), taken=True)
        thunky.switch(i_ref, [lambda: None, lambda: thunky.copy(x_ref, y_ref)], branch=1)

    y = thunky.new_ref(np.zeros(1 << 20, np.float32))
    shape = thunky.ShapeDtypeStruct((1 << 20,), np.float32)
    doc = hinted.trace(shape, y).to_dict()
    assert [c.get("sim") for c in doc["program"][-2:]] == [{"taken": True}, {"branch": 1}]
    # Both copies of 4 MiB run by the hints: about twice the time of one.
    one = copy_all.simulate(shape, y).makespan_s
    assert hinted.simulate(shape, y).makespan_s > 1.9 * one
    with pytest.raises(TypeError, match="taken= is True or False"):
        thunky.jit(lambda p: thunky.cond(p, lambda: None, taken=1)).trace(thunky.new_ref(np.zeros((), np.bool_)))
    with pytest.raises(ValueError, match="trip_count= is a non-negative integer"):
        thunky.jit(lambda p: thunky.while_loop(p, lambda: None, lambda: None, trip_count=-1)).trace(thunky.new_ref(np.zeros((), np.bool_)))


# ---- shard_map

@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("shard_bytes", [4, 128 << 10, 64 << 20], ids=["4B", "128KB", "64MB"])
def test_shard_map_runs_at_every_shard_size(devices, shard_bytes):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(jax.devices()[:devices], ("x",))

    @thunky.jit
    def total(x_ref, out_ref):
        thunky.all_reduce(x_ref, out_ref, "x", reduction="sum")

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    def run(x_local):
        out = jax.new_ref(jnp.zeros_like(x_local))
        total(x_local, out)
        return out[...]

    n = shard_bytes // 4
    x = jnp.arange(n * devices, dtype=jnp.float32) % 7
    got = np.asarray(run(x))
    # Every device gets the sum of the shards, elementwise: shard r is x[r n:(r + 1) n].
    want = np.asarray(x).reshape(devices, n).sum(axis=0)
    np.testing.assert_array_equal(got.reshape(devices, n), np.broadcast_to(want, (devices, n)))


def test_a_device_that_never_arrives_is_an_error_naming_those_that_did(monkeypatch):
    from thunky import _jax
    monkeypatch.setattr(_jax, "RENDEZVOUS_TIMEOUT_S", 0.2)
    meet = _jax._Rendezvous(4, lambda per_rank: [() for _ in per_rank])
    with pytest.raises(RuntimeError, match=r"only devices \[2\] of 4 reached this call within 0.2 s; devices \[0, 1, 3\] never did"):
        meet(np.int32(2), np.zeros(3, np.float32))


# ---- small conveniences

def test_check_passes_a_sound_program_and_names_the_line_of_a_race():
    x = np.ones(4, np.float32)
    assert "no race, no deadlock" in copy_all.check(x, thunky.new_ref(np.zeros(4, np.float32)))

    @thunky.jit
    def racy(x_ref, y_ref):
        tok = thunky.async_start(lambda: thunky.copy(x_ref, y_ref), stream_id=1)
        thunky.memzero(y_ref)  # races with the copy on stream 1
        thunky.async_done(tok)

    with pytest.raises(thunky.ToolError, match=r"test_real_sizes.py:\d+: .*race"):
        racy.check(x, thunky.new_ref(np.zeros(4, np.float32)))


def test_names_reach_the_report_and_its_rows_carry_bytes_and_the_source_line():
    x = np.ones(1024, np.float32)
    rep = copy_all.simulate(x, thunky.new_ref(np.zeros(1024, np.float32)))
    (row,) = rep.ops
    assert row["name"] == "the_copy"
    assert row["bytes"] == 2 * 4096  # read 4 KiB and write 4 KiB
    assert row["source"].endswith(f"test_real_sizes.py:{inspect.getsourcelines(copy_all.fn)[1] + 2}")
    assert "overlap_fraction" in rep.ranks[0]


def test_compare_takes_results_and_warns_of_a_single_cold_run():
    x = np.ones(64, np.float32)
    out = thunky.new_ref(np.zeros(64, np.float32))
    predicted = copy_all.simulate(x, out, machine="h100-8gpu")
    warm = copy_all.execute(x, out)  # warmup=1, iters=3 by default
    assert len(warm.report.to_dict()["iteration_makespans_s"]) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert thunky.compare(predicted, warm)["commands_matched"] == 1
    cold = copy_all.execute(x, out, warmup=0, iters=1)
    with pytest.warns(UserWarning, match="single cold iteration"):
        thunky.compare(predicted, cold)


def test_a_tool_without_models_names_the_places_it_looked_and_a_build_note_finds_them(tmp_path):
    sim = shutil.copy(thunky.find_tool("thunky-sim"), tmp_path / "thunky-sim")
    sched = os.path.join(REPO, "examples", "init_and_copy.json")
    env = {k: v for k, v in os.environ.items() if k != "THUNKY_MODELS"}
    r = subprocess.run([sim, sched, "--machine", "h100-8gpu"], capture_output=True, text=True, env=env)
    assert r.returncode == 2
    assert "none of the places looked at exists: THUNKY_MODELS is not set, " in r.stderr and str(tmp_path / "models") in r.stderr
    # The build writes where its source tree is: a build folder outside the tree finds the models by it.
    (tmp_path / "thunky-models-dir.txt").write_text(os.path.join(REPO, "models") + "\n")
    r = subprocess.run([sim, sched, "--machine", "h100-8gpu"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr


def test_array_math_in_a_body_says_to_wrap_it_in_call_jax_at_the_users_line():
    c = np.ones(4, np.float32)

    @thunky.jit
    def direct(x_ref, y_ref):
        y_ref[...] = c * x_ref[...]

    line = inspect.getsourcelines(direct.fn)[1] + 2
    with pytest.raises(ValueError, match=rf"test_real_sizes.py:{line}: Unsupported primitive 'mul' inside @thunky.jit. "
                                         r"Wrap JAX array operations in thunky.call_jax."):
        direct.trace(np.ones(4, np.float32), thunky.new_ref(np.zeros(4, np.float32)))


def test_a_list_in_scratch_shapes_gives_its_argument_as_a_list_of_refs():
    @thunky.jit(scratch_shapes=([thunky.ShapeDtypeStruct((4,), np.float32)] * 3, thunky.ShapeDtypeStruct((4,), np.float32)))
    def chain(x_ref, y_ref, hops, last):
        src = x_ref
        for h in hops:  # x -> hops0 -> hops1 -> hops2 -> last -> y
            thunky.copy(src, h)
            src = h
        thunky.copy(src, last)
        thunky.copy(last, y_ref)

    doc = chain.trace(np.ones(4, np.float32), thunky.new_ref(np.zeros(4, np.float32))).to_dict()
    assert [n for n, b in doc["buffers"].items() if "role" not in b] == ["hops0", "hops1", "hops2", "last"]  # scratch: no role
    y = thunky.new_ref(np.zeros(4, np.float32))
    chain(np.arange(4, dtype=np.float32), y)
    np.testing.assert_array_equal(y[...], [0, 1, 2, 3])


def test_a_second_eager_call_with_the_same_shapes_runs_the_same_trace_on_the_new_values():
    traced = []

    @thunky.jit
    def double(x_ref, y_ref):
        traced.append(1)
        thunky.copy(x_ref, y_ref.at[:4])
        thunky.copy(x_ref, y_ref.at[4:])

    y = thunky.new_ref(np.zeros(8, np.float32))
    double(np.arange(4, dtype=np.float32), y)
    double(np.arange(4, 8, dtype=np.float32), y)
    assert len(traced) == 1  # traced once: the second call reused it
    np.testing.assert_array_equal(y[...], [4, 5, 6, 7, 4, 5, 6, 7])  # with the second call's values
    double(np.arange(4, dtype=np.float64), thunky.new_ref(np.zeros(8, np.float64)))
    assert len(traced) == 2  # another dtype: traced again


def test_calls_with_jax_refs_trace_the_body_once_a_signature_too():
    # The same cache serves a call made with jax.new_ref Refs (outside any
    # jax.jit): JAX's trace-time check and the run share one trace.
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    traced = []

    @thunky.jit
    def copy_thunk(src, dst):
        traced.append(1)
        dst[...] = src[...]

    dst = jax.new_ref(jnp.zeros((4,), jnp.float32))
    copy_thunk(jax.new_ref(jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32)), dst)
    copy_thunk(jax.new_ref(jnp.array([5.0, 6.0, 7.0, 8.0], jnp.float32)), dst)
    assert len(traced) == 1
    np.testing.assert_array_equal(np.asarray(dst[...]), [5, 6, 7, 8])  # the second call's values


def test_all_to_all_of_a_ref_per_peer_gives_dst_i_of_rank_j_the_src_j_of_rank_i():
    @thunky.jit
    def exchange(s0, s1, d0, d1):
        thunky.all_to_all((s0, s1), (d0, d1), "x", has_split_dimension=False)

    # Global [2, 2] arrays split along x: rank 0 holds s0 = [1 2], s1 = [3 4]; rank 1 s0 = [10 20], s1 = [30 40].
    x0, x1 = np.array([[1, 2], [10, 20]], np.float32), np.array([[3, 4], [30, 40]], np.float32)
    outs = [thunky.new_ref(np.zeros((2, 2), np.float32)) for _ in range(2)]
    spec = thunky.P("x")
    r = exchange.execute(x0, x1, *outs, mesh={"x": 2}, in_specs=(spec,) * 4)
    # d0 of rank 0 = s0 of rank 0 = [1 2]; d0 of rank 1 = s1 of rank 0 = [3 4];
    # d1 of rank 0 = s0 of rank 1 = [10 20]; d1 of rank 1 = s1 of rank 1 = [30 40] (upstream's expectation).
    np.testing.assert_array_equal(r.outputs[0], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(r.outputs[1], [[10, 20], [30, 40]])
    with pytest.raises(ValueError, match="one Ref per peer \\(2\\)"):
        thunky.jit(lambda a, b: thunky.all_to_all((a,), (b,), "x", has_split_dimension=False)).trace(
            np.zeros(2, np.float32), thunky.new_ref(np.zeros(2, np.float32)), mesh={"x": 2})


def test_a_thunky_jit_function_called_inside_call_jax_becomes_a_call_of_its_function():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    const = np.arange(16, dtype=np.float32) + 10

    @thunky.jit
    def inner(x_ref):
        thunky.call_jax(lambda r: r.__setitem__(Ellipsis, r[...] + jnp.asarray(const)), x_ref)

    def mid(x_ref):  # JAX code that calls a thunky.jit function, as upstream allows
        inner(x_ref)

    @thunky.jit
    def outer(x_ref):
        thunky.call_jax(mid, x_ref)

    doc = outer.trace(thunky.new_ref(np.ones(16, np.float32))).to_dict()
    # Not an opaque kernel: a call of inner's function, whose one command is the map.
    assert [c["op"] for c in doc["program"]] == ["call"]
    assert [c["op"] for c in doc["functions"]["inner"]["program"]] == ["map"]

    @jax.jit
    def run(x):
        r = jax.new_ref(x)
        outer(r)
        return r[...]

    np.testing.assert_array_equal(np.asarray(run(jnp.ones(16, jnp.float32))), 1 + const)  # 11, 12, ..., 26


# ---- interference

@thunky.jit
def gemm_beside_all_gather(x_ref, w_ref, y_ref, s_ref, d_ref):
    tok = thunky.async_start(lambda: thunky.all_gather(s_ref, d_ref, "x"), stream_id=0, stream_kind="communication")
    thunky.call_jax(lambda x, w, y: y.__setitem__(Ellipsis, x[...] @ w[...]), x_ref, w_ref, y_ref)
    thunky.async_done(tok)


def test_a_gemm_beside_an_all_gather_reports_what_interference_cost_it():
    pytest.importorskip("jax")
    # On h100-8gpu: 1536 x 2816 bf16 is 12 x 11 = 132 tiles of 128 x 256,
    # one wave on 132 SMs; the 1 GiB all_gather (2^26 bf16 a rank, 8 ranks)
    # holds 24 of them for longer than the GEMM runs, so the GEMM takes two
    # waves: twice its solo time, half of it lost to interference.
    bf16 = ml_dtypes.bfloat16
    args = (_Shaped((1536, 8192), bf16), _Shaped((8192, 2816), bf16), _Shaped((1536, 2816), bf16),
            _Shaped((1 << 26,), bf16), _Shaped((1 << 29,), bf16))
    with_it = gemm_beside_all_gather.simulate(*args, mesh={"x": 8})
    alone = gemm_beside_all_gather.simulate(*args, mesh={"x": 8}, interference=False)
    g = next(o for o in with_it.ops if o["rank"] == 0 and o["op"] == "gemm")
    g0 = next(o for o in alone.ops if o["rank"] == 0 and o["op"] == "gemm")
    solo = g0["end_s"] - g0["start_s"]
    assert g["end_s"] - g["start_s"] == pytest.approx(2 * solo, rel=1e-9)
    assert g["interference_s"] == pytest.approx(solo, rel=1e-9)
    assert g["solo_s"] == pytest.approx(solo, rel=1e-9)
    assert g0["interference_s"] == 0.0 and g0["solo_s"] == solo
    assert with_it.ranks[0]["compute_interference_s"] == pytest.approx(solo, rel=1e-9)
    assert "intf_comp_us" in with_it.table and "intf_comp_us" not in alone.table
