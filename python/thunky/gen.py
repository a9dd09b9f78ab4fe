"""Schedules that thunky-gen writes, as programs a notebook can predict,
run and sweep: `thunky.gen.transformer(model="gpt3-175b", gpus=64, tp=8,
pp=8, global_batch=64)` is one training step as Megatron-Core issues it
(docs/generators.md); `.simulate(machine)` predicts it."""

import json
import os
import tempfile

from ._tools import ToolError, _run
from ._trace import Program

_SIZES = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "micro_batch", "global_batch", "gpus", "tp", "pp")


def transformer(model=None, *, layers=None, hidden=None, heads=None, kv_heads=None, ffn=None, vocab=None, ffn_kind=None, seq=None,
                micro_batch=None, global_batch=None, gpus=None, tp=None, pp=None, recompute=None, precision=None, timeout=None):
    """One training step of a decoder-only transformer: a preset `model`
    (gpt3-175b, llama3-70b, ...) or its sizes, on `gpus` GPUs laid out as
    tensor parallel `tp` (with sequence parallelism) x pipeline `pp`
    (1F1B) x data parallel (what the GPUs leave), `recompute` none,
    selective or full. A layout that does not divide raises ToolError
    (code 2) saying why."""
    given = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab, seq=seq, micro_batch=micro_batch,
                 global_batch=global_batch, gpus=gpus, tp=tp, pp=pp)
    args = ["transformer"]
    if model is not None:
        args += ["--model", str(model)]
    for key in _SIZES:
        value = given[key]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive int, not {value!r}")
        args += ["--" + key.replace("_", "-"), str(value)]
    for flag, value in (("--ffn-kind", ffn_kind), ("--recompute", recompute), ("--precision", precision)):
        if value is not None:
            args += [flag, str(value)]
    with tempfile.TemporaryDirectory(prefix="thunky_") as d:
        path = os.path.join(d, "step.json")
        _run("thunky-gen", args + ["-o", path], None, timeout)
        with open(path) as f:
            doc = json.load(f)
    return Program(doc, {}, {}, doc.get("name", "transformer"))


__all__ = ["transformer", "ToolError"]
