"""The user guide's hello world, with `import thunky`: zero a buffer, copy
four elements into it and fill the rest with 1.0."""

import numpy as np

import thunky


@thunky.jit
def init_and_copy(src_ref, dst_ref):
    # Zero the entire destination buffer (cudaMemsetAsync)
    thunky.memzero(dst_ref)
    # Copy the first 4 elements from src_ref into dst_ref (cudaMemcpyAsync)
    thunky.copy(src_ref.at[:4], dst_ref.at[:4])
    # Fill the last 4 elements with float32 1.0
    thunky.memset(dst_ref.at[4:], np.float32(1.0))


if __name__ == "__main__":
    x = np.arange(8, dtype=np.float32)
    out_ref = thunky.new_ref(np.empty_like(x))
    init_and_copy(x, out_ref)
    print(out_ref[...])
    # [0. 1. 2. 3. 1. 1. 1. 1.]
