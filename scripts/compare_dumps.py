#!/usr/bin/env python3
"""Compares two folders of thunky-exec dumps (--dump DIR) of one schedule:
python3 scripts/compare_dumps.py SCHED.json CPU_DIR CUDA_DIR.

Integers and bools must be equal; NaN must meet NaN and an infinity the same
infinity. Floats may differ by rtol of their own magnitude plus rtol of the
buffer's largest: a GEMM summed in another order (cuBLASLt's fused
multiply-adds against Eigen's) errs by about K eps (|A| |B|), far more than
a near-zero element's own digits, but small beside the buffer. rtol follows
the buffer's dtype in the schedule (bf16 and f8 are dumped widened to f32):
1e-12 f64, 1e-5 f32, 2e-3 f16, 1e-2 bf16, 0.13 f8. Exit 0 when they agree,
1 with the first difference named.
"""
import sys, os, glob, json
import numpy as np
sched, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
dtypes = {k: v.get("dtype", "f32") for k, v in json.load(open(sched)).get("buffers", {}).items()}
rtol = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3, "bf16": 1e-2, "f8e4m3": 0.13, "f8e5m2": 0.13}
worst, exact = 0.0, True
for fa in sorted(glob.glob(os.path.join(a, "*.npy"))):
    name = os.path.basename(fa)
    fb = os.path.join(b, name)
    if not os.path.exists(fb):
        print("missing " + name); sys.exit(1)
    x, y = np.load(fa), np.load(fb)
    if x.shape != y.shape:
        print("shape %s vs %s in %s" % (x.shape, y.shape, name)); sys.exit(1)
    if x.dtype.kind not in "fc":
        if not np.array_equal(x, y):
            print("values differ in " + name); sys.exit(1)
        continue
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if np.array_equal(x64, y64, equal_nan=True):
        continue
    exact = False
    fx, fy = np.isfinite(x64), np.isfinite(y64)
    same_special = (np.isnan(x64) & np.isnan(y64)) | (np.isinf(x64) & (x64 == y64))
    if np.any(~(fx & fy) & ~same_special):
        i = int(np.argmax(~(fx & fy) & ~same_special))
        print("%s[%d]: cpu %g, cuda %g" % (name, i, x64.flat[i], y64.flat[i])); sys.exit(1)
    tol = rtol.get(dtypes.get(name.split(".")[0], "f32"), 1e-5)
    both = fx & fy
    largest = float(np.max(np.abs(x64[fx]))) if fx.any() else 0.0
    err = np.abs(x64[both] - y64[both])
    allowed = tol * np.maximum(np.abs(x64[both]), np.abs(y64[both])) + tol * largest
    if err.size:
        worst = max(worst, float(np.max(err / np.maximum(allowed, 1e-300))))
    if np.any(err > allowed):
        i = int(np.argmax(err - allowed))
        print("%s: error %.3g where %.3g is allowed" % (name, err[i], allowed[i])); sys.exit(1)
print("exact" if exact else "within %.0f%% of the bound" % (100 * worst))
