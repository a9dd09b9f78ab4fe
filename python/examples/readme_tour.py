import numpy as np
import thunky

@thunky.jit
def init_and_copy(src_ref, dst_ref):
    thunky.memzero(dst_ref)
    thunky.copy(src_ref.at[:4], dst_ref.at[:4])
    thunky.memset(dst_ref.at[4:], np.float32(1.0))

out = thunky.new_ref(np.empty(8, np.float32))
init_and_copy(np.arange(8, dtype=np.float32), out)  # runs now, on the cpu backend
print(out[...])

@thunky.jit
def ring_shift(x_ref, y_ref):
    thunky.collective_permute(x_ref, y_ref, "x", source_target_pairs=[(i, (i + 1) % 4) for i in range(4)])

args = (np.arange(8, dtype=np.float32), thunky.new_ref(np.zeros(8, np.float32)))
where = dict(mesh={"x": 4}, in_specs=(thunky.P("x"), thunky.P("x")))
measured = ring_shift.execute(*args, **where)
print(measured.outputs[0])  # each rank's pair moved one rank on
predicted = ring_shift.simulate(*args, machine="h100-8gpu", **where)
print(f"predicted {predicted.makespan_s * 1e6:.1f} us on h100-8gpu, measured {measured.report.makespan_s * 1e6:.1f} us on the cpu")

import jax.numpy as jnp

@thunky.jit
def layer(x_ref, w_ref, b_ref, out_ref):
    thunky.call_jax(lambda x, w, b, o: o.__setitem__(Ellipsis, jnp.tanh(x[...] @ w[...] + b[...])), x_ref, w_ref, b_ref, out_ref)

x, w, b = np.ones((4, 8), np.float32), np.full((8, 3), 0.1, np.float32), np.arange(3, dtype=np.float32)
print([c["op"] for c in layer.trace(x, w, b, thunky.new_ref(np.zeros((4, 3), np.float32))).to_dict()["program"]])
