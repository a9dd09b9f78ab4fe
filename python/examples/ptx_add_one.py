"""The user guide's raw PTX kernel, with `import thunky`. thunky-sim prices
it; the cpu backend cannot run PTX and refuses it unless the call gives
`cpu=`, the map it runs instead (docs/python.md)."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

ADD_ONE_PTX = """
.version 7.0
.target sm_80
.address_size 64

.visible .entry add_one_kernel(
    .param .u64 in_ptr,
    .param .u64 out_ptr
) {
    .reg .pred %p0;
    .reg .f32 %f<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [in_ptr];
    ld.param.u64 %rd2, [out_ptr];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd0, %r1, 4;
    add.u64 %rd1, %rd1, %rd0;
    add.u64 %rd2, %rd2, %rd0;

    ld.global.f32 %f0, [%rd1];
    add.f32 %f1, %f0, 0f3F800000;  // + 1.0f
    st.global.f32 [%rd2], %f1;
    ret;
}
"""

@thunky.jit
def run_ptx_add_one(in_ref, out_ref):
  thunky.ptx_kernel(
      in_ref,
      out_ref,
      written=[False, True],
      kernel_name="add_one_kernel",
      ptx=ADD_ONE_PTX,
      grid_dim=(1, 1, 1),
      block_dim=(4, 1, 1),
  )
