"""JAX on the CPU shows one device unless asked before it starts: the tests
that run shard_map over a mesh need four."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
