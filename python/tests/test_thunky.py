"""The thunky package: the user guide's programs traced, run and predicted."""

import json
import os
import sys

import numpy as np
import pytest

import thunky

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def line_of(fn, text):
    """The source line of `text` inside function `fn`'s file."""
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for k, l in enumerate(lines):
        if text in l:
            return start + k
    raise AssertionError(text)


sys.path.insert(0, os.path.join(REPO, "python", "examples"))
from init_and_copy import init_and_copy  # noqa: E402  (the guide's hello world)


def test_init_and_copy_traces_to_the_bundled_schedule_and_runs_to_the_guides_result():
    x = np.arange(8, dtype=np.float32)
    out = thunky.new_ref(np.empty_like(x))
    doc = init_and_copy.trace(x, out).to_dict()
    # src is only read: input; dst is written first: output.
    assert doc["buffers"]["src_ref"]["role"] == "input"
    assert doc["buffers"]["dst_ref"]["role"] == "output"
    bundled = json.load(open(os.path.join(REPO, "examples", "init_and_copy.json")))
    assert [c["op"] for c in doc["program"]] == [c["op"] for c in bundled["program"]]
    assert doc["program"][1] == {"op": "copy", "src": "src_ref[0:4]", "dst": "dst_ref[0:4]"}
    r = init_and_copy.execute(x, out)
    # The guide prints [0. 1. 2. 3. 1. 1. 1. 1.]; the Ref holds it too.
    np.testing.assert_array_equal(r.outputs[0], [0, 1, 2, 3, 1, 1, 1, 1])
    np.testing.assert_array_equal(out[...], [0, 1, 2, 3, 1, 1, 1, 1])
    assert r.report.source == "exec" and r.report.makespan_s > 0


def test_scratch_slices_and_slice_assignment():
    @thunky.jit(scratch_shapes=[thunky.ShapeDtypeStruct((4,), np.float32)])
    def swap_halves(buf_ref, scratch_ref):
        thunky.copy(buf_ref.at[:4], scratch_ref)
        thunky.copy(buf_ref.at[4:], buf_ref.at[:4])
        thunky.copy(scratch_ref, buf_ref.at[4:])

    buf = thunky.new_ref(np.arange(8, dtype=np.int32))
    doc = swap_halves.trace(buf).to_dict()
    # Read first, then written: inout; the scratch buffer is scratch.
    assert doc["buffers"]["buf_ref"]["role"] == "inout"
    assert doc["buffers"]["scratch_ref"] == {"shape": [4], "dtype": "f32"}
    swap_halves.execute(buf)
    np.testing.assert_array_equal(buf[...], [4, 5, 6, 7, 0, 1, 2, 3])

    @thunky.jit
    def copy_slices(src_ref, dst_ref):
        dst_ref[:4] = src_ref[4:8]

    dst = thunky.new_ref(np.zeros(8, np.float32))
    # dst is written before any read: an output, whose other elements are
    # undefined (the cpu backend leaves NaN there).
    assert copy_slices.trace(np.arange(8, dtype=np.float32), dst).to_dict()["program"] == [{"op": "copy", "src": "src_ref[4:8]", "dst": "dst_ref[0:4]"}]
    copy_slices.execute(np.arange(8, dtype=np.float32), dst)
    np.testing.assert_array_equal(dst[:4], [4, 5, 6, 7])


def test_views_chain_and_negative_starts():
    @thunky.jit
    def f(a, b):
        thunky.copy(a.at[-2:], b.at[1].at[0:2])

    doc = f.trace(np.zeros(4, np.float32), thunky.new_ref(np.zeros((3, 4), np.float32))).to_dict()
    # a[-2:] is elements 2..4 of 4; b[1] then [0:2].
    assert doc["program"][0] == {"op": "copy", "src": "a[2:4]", "dst": "b[1][0:2]"}


def test_a_non_contiguous_view_is_a_value_error_naming_the_users_line():
    @thunky.jit
    def f(a, b):
        thunky.copy(a.at[:, 1:2], b)  # the bad view

    with pytest.raises(ValueError) as e:
        f.trace(np.zeros((4, 4), np.float32), thunky.new_ref(np.zeros((4, 1), np.float32)))
    assert f"{__file__}:{line_of(f.fn, 'the bad view')}: a view must be contiguous" in str(e.value)
    with pytest.raises(ValueError, match="out of bounds"):
        f2 = thunky.jit(lambda a: thunky.memzero(a.at[5]))
        f2.trace(thunky.new_ref(np.zeros(4, np.float32)))


def test_a_written_argument_passed_as_a_plain_array_is_a_type_error():
    with pytest.raises(TypeError, match="argument 'dst_ref' is written but was passed as a plain array"):
        init_and_copy.trace(np.zeros(8, np.float32), np.zeros(8, np.float32))


def test_nested_jit_becomes_a_function_and_calls():
    @thunky.jit(scratch_shapes=[thunky.ShapeDtypeStruct((4,), np.float32)])
    def helper_step(x_ref, tmp_ref):
        thunky.copy(x_ref, tmp_ref)
        thunky.copy(tmp_ref, x_ref)

    @thunky.jit
    def outer_fn(x_ref):
        helper_step(x_ref.at[:4])
        helper_step(x_ref.at[4:])

    x = thunky.new_ref(np.arange(8, dtype=np.float32))
    doc = outer_fn.trace(x).to_dict()
    # One function (the same shapes twice), its scratch hoisted into it, two calls.
    # (Its parameter is renamed where a top-level buffer has its name.)
    assert list(doc["functions"]) == ["helper_step"]
    assert doc["functions"]["helper_step"]["params"] == ["x_ref_1"]
    assert doc["functions"]["helper_step"]["scratch"] == {"tmp_ref": {"shape": [4], "dtype": "f32"}}
    assert doc["program"] == [{"op": "call", "fn": "helper_step", "args": {"x_ref_1": "x_ref[0:4]"}},
                              {"op": "call", "fn": "helper_step", "args": {"x_ref_1": "x_ref[4:8]"}}]
    # The call reads x before writing it: inout.
    assert doc["buffers"]["x_ref"]["role"] == "inout"
    outer_fn.execute(x)
    np.testing.assert_array_equal(x[...], np.arange(8))


def test_streams_tokens_and_their_mistakes():
    @thunky.jit
    def two_streams(a, b, c, d):
        t1 = thunky.async_start(lambda: thunky.copy(a, c), stream_id=0)
        t2 = thunky.async_start(lambda: thunky.copy(b, d), stream_id=1)
        thunky.async_done(t1)
        thunky.async_done(t2)

    c, d = thunky.new_ref(np.zeros(4, np.float32)), thunky.new_ref(np.zeros(4, np.float32))
    doc = two_streams.trace(np.ones(4, np.float32), 2 * np.ones(4, np.float32), c, d).to_dict()
    assert doc["program"][1]["stream"] == {"kind": "computation", "id": 1}
    assert doc["program"][0]["body"] == [{"op": "copy", "src": "a", "dst": "c"}]
    two_streams.execute(np.ones(4, np.float32), 2 * np.ones(4, np.float32), c, d)
    np.testing.assert_array_equal(d[...], [2, 2, 2, 2])

    @thunky.jit
    def never_awaited(a, c):
        thunky.async_start(lambda: thunky.copy(a, c), stream_kind="communication")  # started, not awaited

    with pytest.raises(ValueError) as e:
        never_awaited.trace(np.ones(4, np.float32), c)
    assert f":{line_of(never_awaited.fn, 'started, not awaited')}: the token of this async_start is never awaited" in str(e.value)

    @thunky.jit
    def crosses(p, a, c):
        tok = thunky.async_start(lambda: thunky.copy(a, c))
        thunky.cond(p, lambda: thunky.async_done(tok))

    with pytest.raises(ValueError, match="async_done of a token started in another cond"):
        crosses.trace(np.array(True), np.ones(4, np.float32), c)


def test_control_flow_runs_collatz():
    @thunky.jit(scratch_shapes=(thunky.ShapeDtypeStruct((), np.bool_),))
    def count_down(n, steps, go):
        # No call_jax yet: a loop whose cond only copies a flag the body clears.
        thunky.memzero(steps)
        thunky.while_loop(go, lambda: thunky.copy(n, go), lambda: thunky.memzero(n))

    doc = count_down.trace(thunky.new_ref(np.array(True)), thunky.new_ref(np.int32(5))).to_dict()
    assert doc["program"][1]["op"] == "while"
    assert doc["program"][1]["cond"] == [{"op": "copy", "src": "n", "dst": "go"}]
    # n starts true: the body runs once and clears it.
    assert count_down.execute(thunky.new_ref(np.array(True)), thunky.new_ref(np.int32(5))).outputs[0].item() is False


def test_collectives_on_a_mesh_with_sharded_arguments():
    @thunky.jit
    def sum_across(x_ref, out_ref):
        thunky.all_reduce(x_ref, out_ref, "x", reduction="sum")

    x = np.arange(8, dtype=np.float32)
    out = thunky.new_ref(np.zeros(8, np.float32))
    p = sum_across.trace(x, out, mesh={"x": 4}, in_specs=(thunky.P("x"), thunky.P("x")))
    doc = p.to_dict()
    assert doc["mesh"] == {"axis_names": ["x"], "shape": [4]}
    assert doc["buffers"]["x_ref"]["shape"] == [2]
    assert doc["buffers"]["x_ref"]["global"] == {"shape": [8], "spec": ["x"]}
    r = sum_across.execute(x, out, mesh={"x": 4}, in_specs=(thunky.P("x"), thunky.P("x")))
    # Every rank's 2 elements summed over the 4: [0+2+4+6, 1+3+5+7] on each.
    np.testing.assert_array_equal(r.outputs[0], [12, 16] * 4)
    # One all_reduce of 2 f32 (8 bytes) on rank 0.
    [row] = r.report.collectives
    assert (row["id"], row["op"], row["count"], row["bytes"]) == ("/program/0", "all_reduce", 1, 8)
    assert row["min_s"] == row["max_s"] == row["mean_s"] > 0
    with pytest.raises(ValueError, match="unknown axis name 'y'"):
        thunky.jit(lambda a, b: thunky.all_gather(a, b, "y")).trace(x, out, mesh={"x": 4})
    with pytest.raises(ValueError, match="does not divide into 3 shards"):
        sum_across.trace(x, out, mesh={"x": 3}, in_specs=(thunky.P("x"), None))

    @thunky.jit
    def grouped(a, b):
        thunky.collective_group(lambda: (thunky.all_reduce(a, b, "x"), thunky.memzero(b)))  # not a collective

    with pytest.raises(ValueError, match="collective_group can only contain collective operations, not memzero"):
        grouped.trace(x, out, mesh={"x": 2})


def test_rank_dependent_views_and_predicted_against_measured(tmp_path):
    @thunky.jit
    def place(x_ref, out_ref):
        thunky.memzero(out_ref)
        thunky.copy(x_ref, out_ref.at[thunky.ds(thunky.axis_index("x") * 2, 2)])

    out = thunky.new_ref(np.zeros(8, np.float32))
    args = (np.ones(2, np.float32), out)
    doc = place.trace(*args, mesh={"x": 4}).to_dict()
    assert doc["program"][1]["dst"] == "out_ref[ds(x * 2, 2)]"
    measured = place.execute(*args, mesh={"x": 4}).report
    predicted = place.simulate(*args, mesh={"x": 4}, machine="h100-8gpu")
    assert predicted.source == "sim" and len(predicted.ranks) == 4
    figures = thunky.compare(predicted, measured)
    # 4 ranks x 2 commands, all matched.
    assert figures["commands_matched"] == 8
    assert "makespan error" in figures["table"]
    # Both reports draw themselves (a notebook shows _repr_svg_): the
    # measurement 4 ranks' lanes; the prediction, whose ranks share one
    # timeline (one class), one lane group for the 4.
    svg = measured._repr_svg_()
    assert svg.startswith("<svg") and svg.count("computation:0</text>") == 4
    svg = predicted._repr_svg_()
    assert svg.startswith("<svg") and svg.count("computation:0</text>") == 1 and "x=* (4 ranks) computation:0" in svg
    assert len(measured.ops) == 8 and {o["op"] for o in measured.ops} == {"memzero", "copy"}
    # No collective here: no wait, no transfer, and no op has a transfer start.
    assert all(r["wait_s"] == 0 and r["transfer_s"] == 0 for r in predicted.ranks)
    assert all(o["transfer_start_s"] is None for o in measured.ops)
    trace = json.loads(open(measured.trace(str(tmp_path / "t.json"))).read())
    assert any(e.get("name") == "copy" or "copy" in str(e.get("args", "")) for e in trace["traceEvents"])


def test_a_tool_error_names_the_users_line(tmp_path):
    @thunky.jit
    def bad(a, b):
        thunky.all_gather(a, b, "x")  # dst is not n times src

    with pytest.raises(thunky.ToolError) as e:
        bad.execute(np.ones(4, np.float32), thunky.new_ref(np.zeros(4, np.float32)), mesh={"x": 2})
    assert f"{__file__}:{line_of(bad.fn, 'dst is not n times src')}:" in str(e.value)
    assert e.value.code == 2


def test_a_missing_tool_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("THUNKY_BIN", str(tmp_path))
    with pytest.raises(thunky.ToolError, match="THUNKY_BIN is .* which has no thunky-exec"):
        init_and_copy.execute(np.zeros(8, np.float32), thunky.new_ref(np.zeros(8, np.float32)))


def test_the_readme_tour_prints_what_the_readme_says():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, os.path.join(REPO, "python", "examples", "readme_tour.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[0. 1. 2. 3. 1. 1. 1. 1.]"
    # Rank r's pair [2r, 2r + 1] goes to rank r + 1: rank 0 gets rank 3's [6, 7].
    assert lines[1] == "[6. 7. 0. 1. 2. 3. 4. 5.]"
    assert lines[2].startswith("predicted ") and "on h100-8gpu, measured" in lines[2]
    # tanh(x @ w + b) through call_jax: one GEMM and one map for the bias and the tanh.
    assert lines[3] == "['gemm', 'map']"


def test_a_run_past_its_timeout_and_an_unknown_dtype_are_clear_errors():
    @thunky.jit(scratch_shapes=[thunky.ShapeDtypeStruct((), np.bool_)])
    def forever(flag, go):
        # The loop's cond copies a flag that stays true: it runs until thunky-exec's trip cap.
        thunky.while_loop(go, lambda: thunky.copy(flag, go), lambda: thunky.memzero(go))

    with pytest.raises(thunky.ToolError, match="did not finish within 0.5 s") as e:
        forever.execute(np.array(True), timeout=0.5)
    assert e.value.code == 124
    with pytest.raises(TypeError, match="argument 'src_ref': thunky has no dtype for complex64"):
        init_and_copy.trace(np.zeros(8, np.complex64), thunky.new_ref(np.zeros(8, np.float32)))


def test_cholesky_and_a_ptx_kernel_with_its_cpu_map_run_as_the_guide_says():
    @thunky.jit(scratch_shapes=thunky.ShapeDtypeStruct((), np.int32))
    def cholesky_in_place(a_ref, info_ref):
        thunky.custom_call("cusolver_potrf_ffi", operands=[a_ref], results=[a_ref, info_ref], backend_config={"lower": False})

    a = thunky.new_ref(np.array([[4.0, 12.0, -16.0], [12.0, 37.0, -43.0], [-16.0, -43.0, 98.0]], np.float32))
    bundled = json.load(open(os.path.join(REPO, "examples", "cholesky.json")))
    assert [c["op"] for c in cholesky_in_place.trace(a).to_dict()["program"]] == [c["op"] for c in bundled["program"]]
    cholesky_in_place(a)
    # The guide prints tril: [[2 0 0] [6 1 0] [-8 5 3]].
    np.testing.assert_array_equal(np.tril(a[...]), [[2, 0, 0], [6, 1, 0], [-8, 5, 3]])

    ptx = open(os.path.join(REPO, "examples", "add_one.ptx")).read()

    @thunky.jit
    def run_ptx_add_one(in_ref, out_ref):
        thunky.ptx_kernel(in_ref, out_ref, written=[False, True], kernel_name="add_one_kernel", ptx=ptx, grid_dim=(1, 1, 1),
                          block_dim=(4, 1, 1), cpu={"out": out_ref, "expr": "x + 1.0", "in": {"x": in_ref}})

    out = thunky.new_ref(np.zeros(4, np.float32))
    run_ptx_add_one(np.array([10, 20, 30, 40], np.float32), out)
    np.testing.assert_array_equal(out[...], [11, 21, 31, 41])


def test_a_jax_mesh_and_partition_specs_are_accepted():
    # JAX's own Mesh over 4 CPU devices (in a process of its own, which
    # asks XLA for them before JAX starts) and its PartitionSpec.
    import subprocess
    import sys
    pytest.importorskip("jax")
    script = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, numpy as np, thunky
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("x",))
@thunky.jit
def sum_across_gpus(x_ref, out_ref):
    thunky.all_reduce(x_ref, out_ref, "x", reduction="sum")
x = np.arange(8, dtype=np.float32)
out = thunky.new_ref(np.zeros(8, np.float32))
r = sum_across_gpus.execute(x, out, mesh=mesh, in_specs=(P("x"), P("x")))
print(r.outputs[0].tolist())
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # Each rank's pair summed over 4 ranks: [0+2+4+6, 1+3+5+7] on each.
    assert r.stdout.strip() == str([12.0, 16.0] * 4)


def test_an_argument_is_an_output_only_when_all_of_it_is_written_for_sure():
    @thunky.jit
    def roles(pred, whole, part, maybe, halves):
        thunky.memzero(whole)
        thunky.memzero(part.at[:2])
        thunky.cond(pred, lambda: thunky.memzero(maybe), None)
        thunky.memzero(halves.at[2:])
        thunky.memzero(halves.at[:2])

    args = [np.array(True)] + [thunky.new_ref(np.full(4, 7, np.int32)) for _ in range(4)]
    doc = roles.trace(*args).to_dict()
    # Whole and unconditional, or in two halves that cover it: its first
    # values never matter, an output. Half written, or written only when
    # pred holds: the rest keeps the caller's values.
    assert [doc["buffers"][n]["role"] for n in ("pred", "whole", "part", "maybe", "halves")] == ["input", "output", "inout", "inout", "output"]
    roles(*args)
    np.testing.assert_array_equal(args[2][...], [0, 0, 7, 7])
    np.testing.assert_array_equal(args[3][...], [0, 0, 0, 0])


def test_memset_writes_any_32_bit_pattern_nan_payloads_included():
    @thunky.jit
    def fill(f_ref, i_ref):
        thunky.memset(f_ref.at[:2], np.uint32(0x7FC00001))  # a quiet NaN with payload 1
        thunky.memset(f_ref.at[2:], np.float32(-np.inf))
        thunky.memset(i_ref, np.float32(1.0))  # 1.0's bits, 0x3f800000, as int32

    f = thunky.new_ref(np.zeros(4, np.float32))
    i = thunky.new_ref(np.zeros(2, np.int32))
    program = fill.trace(f, i).to_dict()["program"]
    # Non-finite patterns travel as bits; finite ones as the value in dst's dtype.
    assert program[0] == {"op": "memset", "dst": "f_ref[0:2]", "bits": "0x7fc00001"}
    assert program[1] == {"op": "memset", "dst": "f_ref[2:4]", "bits": "0xff800000"}
    assert program[2] == {"op": "memset", "dst": "i_ref", "value": 0x3F800000}
    fill.execute(f, i)
    assert f[...].view(np.uint32).tolist() == [0x7FC00001, 0x7FC00001, 0xFF800000, 0xFF800000]
    assert i[...].tolist() == [0x3F800000] * 2


def test_a_reports_collectives_split_waiting_from_transfer():
    # An all_reduce its rank reached at 0 whose data moved from 4 us to
    # 10 us: 4 us waiting, 6 us transfer; the collectives' times are the
    # transfers, as the tools' tables give them.
    doc = {"makespan_s": 10e-6, "source": "sim",
           "ranks": [{"rank": 0, "ops": [{"id": "/program/0", "op": "all_reduce", "stream": "computation:0", "start_s": 0.0,
                                          "end_s": 10e-6, "bytes": 16, "transfer_start_s": 4e-6}],
                      "stats": {"comm_s": 10e-6, "wait_s": 4e-6, "transfer_s": 6e-6, "exposed_comm_s": 10e-6,
                                "exposed_wait_s": 4e-6, "exposed_transfer_s": 6e-6}}]}
    r = thunky.Report(doc)
    assert r.ranks[0]["wait_s"] == 4e-6 and r.ranks[0]["transfer_s"] == 6e-6 and r.ranks[0]["exposed_wait_s"] == 4e-6
    assert r.ops[0]["transfer_start_s"] == 4e-6
    assert r.collectives[0]["mean_s"] == pytest.approx(6e-6)
