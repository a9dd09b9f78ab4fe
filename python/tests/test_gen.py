"""thunky.gen: generated schedules from Python, predicted and swept."""

import pytest

import thunky


def test_a_training_step_is_generated_predicted_and_close_to_the_published_one():
    # GPT-3 175B on 64 A100s, TP 8 x PP 8, selective recomputation:
    # Korthikanti et al. 2022 measured 13.75 s a step.
    step = thunky.gen.transformer("gpt3-175b", gpus=64, tp=8, pp=8, global_batch=64, recompute="selective")
    doc = step.to_dict()
    assert doc["mesh"] == {"axis_names": ["pp", "dp", "cp", "tp"], "shape": [8, 1, 1, 8]}
    report = step.simulate("a100-cluster")
    assert report.source == "sim"
    assert abs(report.makespan_s - 13.75) <= 0.10 * 13.75


def test_a_notebook_sweeps_layouts():
    # A small model (4 layers of 256) on 8 GPUs: each layout's mesh is
    # pp x dp x 1 x tp with dp = 8 / (tp pp), and each predicts a step.
    steps = {}
    for tp, pp in ((1, 1), (2, 2), (8, 1)):
        step = thunky.gen.transformer(layers=4, hidden=256, heads=8, vocab=1024, seq=128, gpus=8, tp=tp, pp=pp, global_batch=8)
        assert step.to_dict()["mesh"]["shape"] == [pp, 8 // (tp * pp), 1, tp]
        steps[(tp, pp)] = step.simulate("a100-cluster").makespan_s
    assert all(s > 0 for s in steps.values())
    # tp 8 splits each GEMM eight ways but all-gathers and reduce-scatters
    # every layer's activations across the NVSwitch: not 8 times faster
    # than tp 1 (which has no communication in its layers at all).
    assert steps[(8, 1)] > steps[(1, 1)] / 8


def test_a_layout_that_does_not_divide_says_why():
    with pytest.raises(thunky.ToolError) as e:
        thunky.gen.transformer("llama3-70b", gpus=24, tp=3)
    assert e.value.code == 2 and "tp 3 does not divide the heads" in str(e.value)
    with pytest.raises(ValueError):
        thunky.gen.transformer("llama3-70b", tp=0)
    with pytest.raises(ValueError):
        thunky.gen.transformer("llama3-70b", tp=2.5)
