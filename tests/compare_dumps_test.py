"""scripts/compare_dumps.py, the rule gpu-check judges cuda dumps by (exit 77,
skipped, where numpy is missing)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    sys.exit(77)

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "compare_dumps.py")


class CompareDumps(unittest.TestCase):
    def verdict(self, cpu, cuda, dtype="f32", name="x"):
        with tempfile.TemporaryDirectory() as d:
            for side, values in (("a", cpu), ("b", cuda)):
                os.mkdir(os.path.join(d, side))
                np.save(os.path.join(d, side, name + ".rank0.npy"), values)
            with open(os.path.join(d, "s.json"), "w") as f:
                json.dump({"buffers": {name: {"dtype": dtype}}}, f)
            r = subprocess.run([sys.executable, SCRIPT, os.path.join(d, "s.json"), os.path.join(d, "a"), os.path.join(d, "b")],
                               capture_output=True, text=True)
            return r.returncode, r.stdout.strip()

    def test_same_bits_are_exact(self):
        self.assertEqual(self.verdict(np.array([1, np.nan, -np.inf], np.float32), np.array([1, np.nan, -np.inf], np.float32)), (0, "exact"))

    def test_a_nan_or_an_infinity_against_a_number_fails(self):
        a = np.array([1.0, 2.0, 3.0], np.float32)
        for bad in (np.nan, np.inf, -np.inf):
            rc, out = self.verdict(a, np.array([1.0, bad, 3.0], np.float32))
            self.assertEqual(rc, 1, bad)
            self.assertIn("x.rank0.npy[1]", out)
        # +inf against -inf is no match either.
        self.assertEqual(self.verdict(np.array([np.inf], np.float32), np.array([-np.inf], np.float32))[0], 1)

    def test_near_zero_noise_passes_beside_the_buffers_scale(self):
        # A GEMM element that cancels to 1e-6 may come out 3e-6: 2e-6 is far
        # over 1e-5 of itself but under 1e-5 of the largest element, 1.0.
        self.assertEqual(self.verdict(np.array([1.0, 1e-6], np.float32), np.array([1.0, 3e-6], np.float32))[0], 0)
        # 1e-4 off an element of 1.0 is 10x the f32 bound (1e-5 + 1e-5).
        self.assertEqual(self.verdict(np.array([1.0, 0.5], np.float32), np.array([1.0001, 0.5], np.float32))[0], 1)

    def test_the_bound_follows_the_schedules_dtype(self):
        # bf16 is dumped as f32: one bf16 ulp at 1.0 (2^-7 = 0.0078) passes
        # under bf16's 1e-2 and fails under f32's 1e-5.
        a, b = np.array([1.0], np.float32), np.array([1.0078125], np.float32)
        self.assertEqual(self.verdict(a, b, dtype="bf16")[0], 0)
        self.assertEqual(self.verdict(a, b, dtype="f32")[0], 1)

    def test_integers_must_be_equal(self):
        self.assertEqual(self.verdict(np.array([1, 2], np.int32), np.array([1, 3], np.int32), dtype="s32")[0], 1)


if __name__ == "__main__":
    unittest.main()
