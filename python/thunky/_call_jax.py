"""thunky.call_jax(fn, *args): fn's array math, traced by JAX
(`jax.make_jaxpr`), becomes the schedule's own commands.

- Chains of elementwise primitives fuse into one `map`, computed as thunky
  computes every map: in f64, rounded once when stored.
- `dot_general` becomes a `gemm`; `reduce_sum`, `reduce_max`, `reduce_min`
  and `reduce_prod` a `reduce`; `psum`, `pmax`, `pmin`, `all_gather`,
  `psum_scatter`, `ppermute` and `all_to_all` the collectives; `axis_index`
  the mesh axis' name.
- Nested jaxprs (`jit`, `closed_call`, `custom_jvp_call`, `custom_vjp_call`,
  `remat`) are inlined.
- A value is written into a buffer only where it must be: where a Ref is
  assigned, where a non-elementwise primitive takes it, and where fn
  returns it (a new Ref). A scratch buffer holds each other one.

Anything else becomes an opaque `kernel`, priced by its bytes, which
thunky-sim predicts and which `execute` refuses, naming the primitive and
the user's line (it would compute nothing).
"""

import math
import re
import types

import numpy as np

from . import _source, _trace
from ._refs import Index, Ref, _Read, ds, dtype_name

MAX_DEPTH = 200  # a fused expression past this is written out (thunky's limit is 256)
MAX_OFFSETS = 1024  # a load or store at an offset computed on the device: a switch of at most this many branches

# Elementwise primitives: the expression of their operands' texts.
_UNARY = {"sin": "sin", "cos": "cos", "tan": "tan", "exp": "exp", "log": "log", "log1p": "log1p", "sqrt": "sqrt",
          "rsqrt": "rsqrt", "tanh": "tanh", "abs": "abs", "floor": "floor", "ceil": "ceil", "round": "round", "erf": "erf",
          "erfc": "erfc", "erf_inv": "erf_inv"}
# add_any: the sum of two cotangents, as autodiff (jax.vjp, jax.grad) writes it.
_BINARY = {"add": "+", "add_any": "+", "sub": "-", "mul": "*", "pow": "**", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
           "ge": ">="}
_IDENTITY = {"stop_gradient", "copy", "copy_p", "optimization_barrier", "reduce_precision"}
_INLINE = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr", "remat": "jaxpr",
           "checkpoint": "jaxpr", "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
           "custom_vjp_call_jaxpr": "fun_jaxpr"}
_REDUCE = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "prod"}
_REDUCING = {"psum": "sum", "pmax": "max", "pmin": "min"}


class _Offsets:
    """The one index of a load or store computed on the device: its place
    among the items, its value, how many offsets it may take, and the
    item at offset k."""

    def __init__(self, pos, index, count, item):
        self.pos, self.index, self.count, self.item = pos, index, count, item


class _Const:
    """A value known when tracing (iota and the index arithmetic on it),
    folded rather than computed on the device; written out as a literal or
    an input buffer only where a command reads it."""

    def __init__(self, value):
        self.value = value
        self.shape, self.dtype = value.shape, value.dtype


# Primitives folded when their operands are known when tracing (jnp's
# index arithmetic: x[jnp.arange(2, 6)] wraps and clamps an iota), up to
# MAX_FOLD elements.
_FOLDABLE = {"iota", "add", "sub", "mul", "neg", "lt", "le", "gt", "ge", "eq", "ne", "select_n", "broadcast_in_dim", "reshape",
             "squeeze", "expand_dims", "convert_element_type", "concatenate", "and", "or", "not", "max", "min", "clamp"}
MAX_FOLD = 1 << 16


class _Transposed:
    """A transpose that only GEMMs read: their transpose flag, not a copy.
    Anything else that reads it writes the transpose out first."""

    def __init__(self, src, perm, shape, dtype):
        self.src, self.perm, self.shape, self.dtype = src, perm, tuple(shape), np.dtype(dtype)


# Primitives kept even when nothing reads their results: they communicate,
# or (thunky_call, a thunky.jit function called inside fn) write Refs.
_COMMUNICATING = {"psum", "pmax", "pmin", "all_gather", "psum_scatter", "reduce_scatter", "ppermute", "all_to_all", "thunky_call"}


def _inner_jaxprs(e):
    for v in e.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            inner = getattr(x, "jaxpr", x)
            if hasattr(inner, "eqns"):
                yield inner


def _effect_free(e):
    """Equation `e` itself reads or writes no Ref and communicates nothing."""
    return not e.effects and e.primitive.name not in _COMMUNICATING and e.primitive.name not in ("get", "swap", "addupdate")


def _pure(e):
    """Whether equation `e` only computes its results from its operands:
    effect-free, with no inner jaxpr (what CSE may merge)."""
    return _effect_free(e) and next(_inner_jaxprs(e), None) is None


def _droppable(e):
    """Whether nothing is lost when equation `e`'s results are not computed:
    no effect and no communication, in it or in any jaxpr it holds."""
    return _effect_free(e) and all(_droppable(i) for inner in _inner_jaxprs(e) for i in inner.eqns)


def _plan(jaxpr):
    """Which equations of `jaxpr` to lower: each pure equation equal to an
    earlier one (same primitive, operands and parameters) is left out, its
    results being the earlier one's (common-subexpression elimination), and
    so is each pure one whose results nothing reads (dead-code
    elimination: a GEMM jax.vjp computes and drops). Returns a flag per
    equation and the map of left-out results to the ones kept."""
    alias, seen, equal = {}, {}, set()
    for k, e in enumerate(jaxpr.eqns):
        if not _pure(e):
            continue
        operands = tuple(("literal", repr(a.val), str(a.aval.dtype)) if hasattr(a, "val") else id(alias.get(a, a)) for a in e.invars)
        key = (e.primitive.name, operands, tuple(sorted((n, repr(v)) for n, v in e.params.items())))
        if key in seen:
            for v, w in zip(e.outvars, seen[key].outvars):
                alias[v] = w
            equal.add(k)
        else:
            seen[key] = e
    needed = {id(alias.get(v, v)) for v in jaxpr.outvars if not hasattr(v, "val")}
    live = [False] * len(jaxpr.eqns)
    for k in reversed(range(len(jaxpr.eqns))):
        e = jaxpr.eqns[k]
        if k in equal or (_droppable(e) and not any(id(v) in needed for v in e.outvars)):
            continue
        live[k] = True
        needed |= {id(alias.get(a, a)) for a in e.invars if not hasattr(a, "val")}
    return live, alias


def _static_int(v):
    """The value of an integer known when tracing (a literal), else None."""
    if isinstance(v, _Expr) and not v.ins:
        try:
            return int(v.text)
        except ValueError:
            return None
    return None


# What to write instead of a primitive call_jax leaves opaque, nearest first.
_ALTERNATIVES = {
    "gather": "a view of a Ref (x_ref[2:6], x_ref.at[i]), or x[i] with i computed on the device (a switch over the views)",
    "scatter": "a store into a view of a Ref (o_ref[2:6] = v)",
    "scatter-add": "o_ref[2:6] = o_ref[2:6] + v, a map on a view",
    "cumsum": "a GEMM with a triangular matrix of ones (x @ jnp.triu(jnp.ones((n, n)))), or lax.fori_loop over the prefix",
    "cumprod": "lax.fori_loop over the prefix",
    "cummax": "lax.fori_loop over the prefix",
    "cumlogsumexp": "lax.fori_loop over the prefix",
    "sort": "jnp.argmax or jnp.max in a lax.fori_loop for the top k; thunky has no sort command",
    "concatenate": "writes of each part into views of one Ref (o_ref[:n] = a; o_ref[n:] = b)",
    "pad": "a zeroed Ref (thunky.memzero) and a store of the data into its view",
    "rng_bit_generator": "an input initialised by the schedule (a seeded uniform or normal init)",
    "conv_general_dilated": "a GEMM over an im2col view, or a kernel priced by its FLOPs",
    "select_and_scatter_add": "jnp.where(x == max, g, 0) as a map, for a max-pool gradient of non-overlapping windows",
    "reduce_window": "a reduce over a reshaped view (x.reshape(n, k).max(axis=1)) for non-overlapping windows",
}


class Unsupported(Exception):
    """A primitive call_jax does not lower (yet): it becomes a kernel."""


class _Expr:
    """A value not yet written anywhere: an elementwise expression over
    buffers (`ins`, name -> Ref), of a shape and dtype."""

    def __init__(self, text, ins, shape, dtype, depth=0, atomic=False, idx=None):
        self.text, self.ins, self.shape, self.dtype = text, ins, tuple(shape), np.dtype(dtype)
        self.depth, self.atomic = depth, atomic
        # The same value as a ref index expression (integers, + - * // % min
        # max and axis names), where it is one: a view may then depend on it.
        self.idx = idx


def _core(shape):
    """A shape without its leading ones, which broadcasting ignores."""
    s = tuple(shape)
    return s[next((i for i, d in enumerate(s) if d != 1), len(s)):]


def _broadcasts(e, shape):
    """Whether the map that computes `e` may compute it at `shape` with its
    inputs broadcast by numpy's rules (as sched.json's map reads them): `e`'s
    shape broadcasts to `shape`, and each buffer it reads has one element or
    `e`'s own shape (give or take leading ones), not the same data seen flat."""
    try:
        if np.broadcast_shapes(e.shape, shape) != tuple(shape):
            return False
    except ValueError:
        return False
    return all(math.prod(r.shape) == 1 or _core(r.shape) == _core(e.shape) for r in e.ins.values())


def _one_name_per_ref(e):
    """A map's inputs with each view read once: names that read the same
    view become one (x * x reads x once, and is priced so)."""
    first, rename = {}, {}
    for k, r in e.ins.items():
        key = (r.text, np.dtype(r.dtype).str, tuple(r.shape))
        if key in first:
            rename[k] = first[key]
        else:
            first[key] = k
    if not rename:
        return e.ins, e.text
    text = re.sub(r"\bv\d+\b", lambda m: rename.get(m.group(0), m.group(0)), e.text)
    return {k: r for k, r in e.ins.items() if k not in rename}, text


def _literal(value, dtype):
    v = np.asarray(value).item()
    if np.dtype(dtype).kind == "f":
        v = float(v)
        if math.isnan(v):
            return "(0.0 / 0.0)"
        if math.isinf(v):
            return "(1.0 / 0.0)" if v > 0 else "(-1.0 / 0.0)"
        return repr(v)
    return str(int(v))


class Lowering:
    def __init__(self, tracer, where):
        self.t = tracer
        self.live, self.aliases = [], {}
        self.materialised = {}  # id of an expression -> (it, the scratch buffer that holds its value)
        self.transposed = {}  # a transpose's result var -> the GEMM result that holds it already
        self.where = where  # the user's (file, line): every error names it
        self.names = 0
        self.used = set()  # ids of the vars the jaxpr being lowered reads
        self.scope = None  # (jaxpr, env, read) of the jaxpr being lowered
        self.at = 0  # the index of its equation being lowered
        self.fresh = set()
        self.pending = set()  # ids of scratch results whose one use is a store not yet lowered  # ids of the scratch Refs this call made: a result held in one is returned as it is

    # ---- values
    def _name(self):
        self.names += 1
        return f"v{self.names}"

    def as_expr(self, v):
        if isinstance(v, _Const):
            v = self.constant(v.value)
        if isinstance(v, _Expr) and id(v) in self.materialised:
            v = self.materialised[id(v)][1]  # computed once already: read it
        if isinstance(v, _Expr):
            return v
        if isinstance(v, Ref):
            n = self._name()
            return _Expr(n, {n: v}, v.shape, v.dtype, atomic=True)
        raise TypeError(type(v))

    def written(self, v, shape=None, dtype=None):
        """`v` held in a buffer: a Ref (a scratch buffer made for an
        expression, once: later reads of the same value read that buffer)."""
        if isinstance(v, _Transposed):
            v = self.transpose(v.src, v.perm, self.scratch(v.shape, v.dtype))
        if isinstance(v, Ref) and (shape is None or tuple(shape) == v.shape):
            return v
        kept = self.materialised.get(id(v))
        if kept is not None and (shape is None or tuple(shape) == kept[1].shape) and (dtype is None or np.dtype(dtype) == kept[1].dtype):
            return kept[1]
        e = self.as_expr(v)
        out = self.scratch(shape if shape is not None else e.shape, dtype if dtype is not None else e.dtype)
        self.store(e, out)
        if isinstance(v, _Expr) and out.shape == v.shape and out.dtype == v.dtype:
            self.materialised[id(v)] = (v, out)  # v kept alive with it, so its id stays its own
        return out

    def store(self, v, out):
        """Writes `v` into the Ref `out` (element counts equal, or v one element)."""
        if id(v) in self.pending and v.shape == out.shape and v.dtype == out.dtype:
            block = self.t.blocks[-1][0]
            last = block[-1] if block else {}
            key = next((k for k in ("c", "out", "dst") if last.get(k) == v.text), None)
            if key is not None:  # the command that made v is the last one: it writes out instead
                last[key] = out.text
                self.t.access(out, "write")
                self.t.drop_scratch(v)
                return
        e = self.as_expr(v)
        count = math.prod(e.shape)
        if count not in (1, math.prod(out.shape)):
            raise ValueError(self._here(f"a value of shape {e.shape} is stored into {out.text} of shape {out.shape}"))
        if isinstance(v, Ref) and v.shape == out.shape and v.dtype == out.dtype:
            if v.text != out.text:
                self.t.emit({"op": "copy", "src": v.text, "dst": out.text}, reads=[v], writes=[out])
            return
        ins, text = _one_name_per_ref(e)
        self.t.emit({"op": "map", "out": out.text, "expr": text, "in": {k: r.text for k, r in ins.items()}},
                    reads=list(ins.values()), writes=[out])

    def scratch(self, shape, dtype):
        r = self.t.new_scratch("cj", tuple(int(d) for d in shape), np.dtype(dtype))
        self.fresh.add(id(r))
        return r

    def _here(self, message):
        return f"{self.where[0]}:{self.where[1]}: call_jax: {message}"

    # ---- the jaxpr
    def run(self, jaxpr, consts, args):
        env = {}

        def read(a):
            if hasattr(a, "val"):  # a Literal
                text = _literal(a.val, a.aval.dtype)
                idx = text if np.dtype(a.aval.dtype).kind in "iu" and np.ndim(a.val) == 0 else None
                return _Expr(text, {}, np.shape(a.val), a.aval.dtype, atomic=True, idx=idx)
            v = env[a]
            if isinstance(v, _Const):  # a value known when tracing, needed now: a literal or an input buffer
                v = env[a] = self.constant(v.value)
            return v

        def known(a):
            """`a`'s value if it is known when tracing (a literal, or folded), else None."""
            if hasattr(a, "val"):
                return np.asarray(a.val, dtype=a.aval.dtype)
            v = env.get(alias.get(a, a))
            return v.value if isinstance(v, _Const) else None

        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self.constant(c)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        live, alias = _plan(jaxpr)
        read_var = read

        def read(a):  # an equation computed twice reads the first one's value
            return read_var(alias.get(a, a) if not hasattr(a, "val") else a)

        saved = self.used, self.scope, self.live, self.aliases
        self.live = [(k, e) for k, e in enumerate(jaxpr.eqns) if live[k]]
        self.used = {id(alias.get(v, v)) for _, e in self.live for v in e.invars if not hasattr(v, "val")}
        self.used |= {id(alias.get(v, v)) for v in jaxpr.outvars if not hasattr(v, "val")}
        self.scope = (jaxpr, env, read)
        self.aliases = alias
        for k, eqn in self.live:
            self.at = k
            values = [known(a) for a in eqn.invars]
            if eqn.primitive.name in _FOLDABLE and all(v is not None for v in values) \
                    and all(math.prod(v.aval.shape) <= MAX_FOLD for v in eqn.outvars):
                # Computed now, as JAX computes it: index arithmetic on iota and literals. Eagerly even
                # where an outer JAX trace is active (a thunky.jit called inside jax.jit or shard_map).
                import jax

                with jax.ensure_compile_time_eval():
                    outs = eqn.primitive.bind(*values, **eqn.params)
                for var, v in zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]):
                    env[var] = _Const(np.asarray(v))
                continue
            passes_known = eqn.primitive.name in _INLINE or eqn.primitive.name == "gather"
            # An inlined jaxpr or a gather sees the known values themselves, so folding goes on inside.
            ins = [_Const(v) if passes_known and v is not None and not hasattr(a, "val") else read(a) for a, v in zip(eqn.invars, values)]
            try:
                outs = self.eqn(eqn, ins)
            except Unsupported as why:
                outs = self.kernel(eqn, ins, str(why))
            for var, v in zip(eqn.outvars, outs):
                env[var] = v
        # A value known when tracing leaves as it is (an inlined jit's result may still fold).
        result = [env[alias.get(a, a)] if not hasattr(a, "val") and known(a) is not None else read(a) for a in jaxpr.outvars]
        self.used, self.scope, self.live, self.aliases = saved
        return result

    def canonical(self, a):
        """The var whose value `a` is (itself, or the equal one kept); a literal as it is."""
        return a if hasattr(a, "val") else self.aliases.get(a, a)

    def uses(self, var):
        """The equations still lowered that read `var` (or a value equal to it), with their places."""
        return [(k, e) for k, e in self.live if any(self.canonical(v) is var for v in e.invars)]

    def result(self, eqn, shape, dtype):
        """Where a GEMM, reduce or collective writes: straight into the Ref
        that its result is stored in, where that store is its one use and
        nothing reads or writes that Ref between; else a scratch buffer."""
        jaxpr, env, read = self.scope
        var = eqn.outvars[0]
        uses = self.uses(var)
        stored = False
        if len(uses) == 1 and all(v is not var for v in jaxpr.outvars):
            k, store = uses[0]
            if store.primitive.name == "swap" and self.canonical(store.invars[1]) is var \
                    and id(store.outvars[0]) not in self.used:
                stored = True
                ref = store.invars[0]
                between = jaxpr.eqns[self.at + 1:k]
                index = store.invars[2:]
                ready = all(hasattr(i, "val") or i in env for i in index) and ref in env
                if ready and not any(ref in e.invars for e in between):
                    try:
                        target = self.view(env[ref], store, [read(i) for i in index])
                    except Unsupported:
                        target = None
                    if target is not None and target.shape == tuple(shape) and target.dtype == np.dtype(dtype):
                        return target
        out = self.scratch(shape, dtype)
        if stored:  # its store's view is not known yet: store() may still send the command there
            self.pending.add(id(out))
        return out

    def constant(self, c):
        c = np.asarray(c)
        if c.size == 1:
            return _Expr(_literal(c.reshape(()), c.dtype), {}, c.shape, c.dtype, atomic=True)
        return self.t.new_constant("cj_const", c)

    def eqn(self, eqn, ins):
        """Lowers one equation by the rule registered for its primitive
        (RULES, below); a primitive without one becomes an opaque kernel."""
        self._eqn = eqn
        lower = RULES.get(eqn.primitive.name)
        if lower is None:
            raise Unsupported(eqn.primitive.name)
        return lower(self, eqn, ins, eqn.params, eqn.outvars[0].aval if eqn.outvars else None)

    # ---- control flow: thunky's own switch and while
    def cond(self, eqn, ins):
        """lax.cond and lax.switch: a switch on the s32 index; each branch
        writes the results into the same buffers."""
        branches = eqn.params["branches"]
        known = _static_int(ins[0])
        if known is not None:  # an index known when tracing (platform_index): that branch alone, clamped as a switch clamps
            closed = branches[min(max(known, 0), len(branches) - 1)]
            return self.run(closed.jaxpr, closed.consts, ins[1:])
        index = self.written(ins[0], (), np.int32)
        outs = [self.scratch(v.aval.shape, v.aval.dtype) for v in eqn.outvars]

        def branch(closed):
            def body():
                for v, o in zip(self.run(closed.jaxpr, closed.consts, ins[1:]), outs):
                    self.store(v, o)
            return body

        blocks = [self.t.region(f"branches/{k}", branch(b)) for k, b in enumerate(branches)]
        self.t.emit({"op": "switch", "index": index.text, "branches": blocks}, reads=[index])
        return outs

    def while_(self, eqn, ins):
        """lax.while_loop (and fori_loop with bounds known at run time)."""
        p = eqn.params
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        return self.loop(init, eqn.outvars,
                         lambda carries: self.run(cond.jaxpr, cond.consts, list(cond_consts) + carries)[0],
                         lambda carries: self.run(body.jaxpr, body.consts, list(body_consts) + carries))

    def scan(self, eqn, ins):
        """lax.scan (and fori_loop with static bounds): a while on a counter
        of its own. Step t reads xs[t] and writes ys[t] (t counted down
        for reverse) through a switch over the `length` offsets, as any
        load or store at an offset computed on the device."""
        p = eqn.params
        nconst, ncarry, length = p["num_consts"], p["num_carry"], int(p["length"])
        consts, init, xs = ins[:nconst], ins[nconst:nconst + ncarry], [self.written(x) for x in ins[nconst + ncarry:]]
        ys = [self.scratch(var.aval.shape, var.aval.dtype) for var in eqn.outvars[ncarry:]]
        if (xs or ys) and length > MAX_OFFSETS:
            raise Unsupported(f"scan over arrays of {length} steps (at most {MAX_OFFSETS})")
        counter = self.scratch((), np.int32)
        self.store(_Expr("0", {}, (), np.int32, atomic=True), counter)
        scalar = types.SimpleNamespace(shape=(), dtype=np.dtype(np.int32))
        flag = types.SimpleNamespace(shape=(), dtype=np.dtype(np.bool_))
        body = p["jaxpr"]

        def step(carries):
            t = self.combine("(" + str(length - 1) + " - {0})", [counter], scalar) if p["reverse"] else counter
            row = lambda a: (a, [None] + [slice(None)] * (len(a.shape) - 1), _Offsets(0, t, length, lambda k: k))
            sliced = [self.load_at(*row(x)) for x in xs]
            out = self.run(body.jaxpr, body.consts, list(consts) + carries + sliced)
            for y, buf in zip(out[ncarry:], ys):
                self.store_at(*row(buf), y)
            self.store(self.combine("({0} + 1)", [counter], scalar), counter)
            return out[:ncarry]

        carries = self.loop(init, eqn.outvars[:ncarry], lambda carries: self.combine("({0} < " + str(length) + ")", [counter], flag), step)
        return carries + ys

    def loop(self, init, outvars, cond, body):
        """A while whose carries live in buffers: `cond(carries)` gives the
        predicate, written by the cond block into a bool buffer;
        `body(carries)` the new carries, each computed apart before any is
        stored."""
        carries = []
        for v, var in zip(init, outvars):
            c = self.scratch(var.aval.shape, var.aval.dtype)
            self.store(v, c)
            carries.append(c)
        flag = self.scratch((), np.bool_)

        def cond_block():
            self.store(cond(carries), flag)

        def body_block():
            new = body(carries)
            staged = [v if isinstance(v, Ref) and id(v) in self.fresh and v not in carries else self.written(v, c.shape, c.dtype)
                      for v, c in zip(new, carries)]
            for v, c in zip(staged, carries):
                self.store(v, c)

        c_block = self.t.region("cond", cond_block, conditional=False)
        b_block = self.t.region("body", body_block)
        self.t.emit({"op": "while", "cond_buf": flag.text, "cond": c_block, "body": b_block}, reads=[flag])
        return carries

    # ---- elementwise
    def combine(self, form, ins, aval, idx_form=None):
        es = [self.as_expr(v) for v in ins]
        shape = tuple(aval.shape)
        for e in es:
            if math.prod(e.shape) not in (1, math.prod(shape)) and not _broadcasts(e, shape):
                raise Unsupported(f"broadcasting {e.shape} to {shape}")
        texts = [e.text if e.atomic else "(" + e.text + ")" for e in es]
        merged = {}
        for e in es:
            merged.update(e.ins)
        depth = 1 + max([e.depth for e in es] or [0])
        idx = None
        if idx_form and np.dtype(aval.dtype).kind in "iu" and all(e.idx is not None for e in es):
            idx = idx_form.format(*[e.idx for e in es])
        # Every form is a call or wrapped in parentheses: its text is one term.
        out = _Expr(form.format(*texts), merged, shape, aval.dtype, depth, atomic=True, idx=idx)
        if depth > MAX_DEPTH:
            return self.written(out)
        return out

    def reshape(self, v, aval):
        shape = tuple(aval.shape)
        count = math.prod(v.shape)
        if count == math.prod(shape):
            return self._with_shape(v, shape)
        if count == 1:  # one element broadcasts in any map
            e = self.as_expr(v)
            return _Expr(e.text, e.ins, shape, e.dtype, e.depth, e.atomic, e.idx)
        raise Unsupported(f"broadcasting {tuple(v.shape)} to {shape}")

    def broadcast(self, v, dims, aval):
        """`v` repeated along new leading dimensions or its dimensions of
        size 1, as a map input broadcasts by numpy's rules (a bias row over a
        matrix); None where that is not such a broadcast."""
        shape, src, dims = tuple(aval.shape), tuple(v.shape), tuple(dims)
        if math.prod(src) in (1, math.prod(shape)):
            return None  # a reshape, or one element: reshape() says
        if any(a >= b for a, b in zip(dims, dims[1:])):
            return None  # a transpose on the way
        lead = len(shape) - len(src)
        if dims != tuple(range(lead, len(shape))):
            # A dimension is inserted in the middle or at the end (m[:, None]
            # of a row max): the same data with ones there broadcasts.
            ones = [1] * (len(shape) - dims[0])
            for d, n in zip(dims, src):
                ones[d - dims[0]] = n
            v, src, lead = self._with_shape(v, tuple(ones)), tuple(ones), dims[0]
        if any(s not in (1, o) for s, o in zip(src, shape[lead:])):
            return None
        e = self.as_expr(v)
        if not _broadcasts(e, shape):
            return None
        return _Expr(e.text, e.ins, shape, e.dtype, e.depth, e.atomic)

    def _with_shape(self, v, shape):
        """`v` under another shape of as many elements: a Ref's reshaped
        view (no data moves), or an expression over reshaped views of the
        buffers it reads (its one-element inputs broadcast as they are; one
        that broadcasts within `v` pins its shape, so `v` is written first)."""
        n = math.prod(v.shape)
        if isinstance(v, _Expr) and any(math.prod(r.shape) not in (1, n) for r in v.ins.values()):
            v = self.written(v)
        if isinstance(v, Ref):
            return v.reshape(shape)
        ins = {k: (r.reshape(shape) if math.prod(r.shape) == n else r) for k, r in v.ins.items()}
        return _Expr(v.text, ins, shape, v.dtype, v.depth, v.atomic, v.idx)

    # ---- views of Refs
    def transformed(self, v, transform):
        """`v` under one of upstream's Ref transforms, as thunky's view of it."""
        kind = type(transform).__name__
        if kind == "ReshapeTransform":
            return v.reshape(tuple(transform.shape))
        if kind == "BitcastTransform":
            to = np.dtype(transform.dtype)
            if to.itemsize != np.dtype(v.dtype).itemsize:
                raise Unsupported(f"a bitcast of {np.dtype(v.dtype).name} to {to.name} inside call_jax: JAX shapes it as a TPU's "
                                  "tiled layout (the second-to-last axis scales); bitcast the Ref before call_jax, "
                                  "where the last axis scales as in NumPy")
            return v.bitcast(to)
        raise Unsupported(f"the Ref transform {kind}")

    def view(self, ref, eqn, index_vals, dynamic=False):
        """The view `ref[indexers]` names. With `dynamic`, one index that is
        computed on the device is allowed: the result is then (ref viewed
        by the indexers before, items with None at that index, Offsets)."""
        if not isinstance(ref, Ref):
            raise Unsupported("a Ref made inside fn")
        import jax
        indexers = jax.tree_util.tree_unflatten(eqn.params["tree"], list(index_vals))
        v = ref
        device = "a load or store at an offset computed from values on the device"
        for at, ix in enumerate(indexers):
            if not hasattr(ix, "indices"):  # a Ref transform: ref.bitcast(...), ref.reshape(...)
                v = self.transformed(v, ix)
                continue
            items, offsets = [], None
            last = at == len(indexers) - 1
            for pos, (item, n) in enumerate(zip(ix.indices, v.shape)):
                if hasattr(item, "start") and hasattr(item, "size"):
                    start, size, stride = item.start, int(item.size), getattr(item, "stride", 1)
                    if stride != 1:
                        raise Unsupported("a strided load or store")
                    if isinstance(start, _Expr) and start.idx is not None and not start.ins:
                        try:
                            start = int(start.idx)
                        except ValueError:  # it depends on the rank: a view that moves with it
                            items.append(ds(Index(start.idx), size))
                            continue
                    if not isinstance(start, (int, np.integer)):
                        if not (dynamic and last and offsets is None):
                            raise Unsupported(device)
                        offsets = _Offsets(pos, start, n - size + 1, lambda k, size=size: slice(k, k + size))
                        items.append(None)
                        continue
                    items.append(slice(None) if (int(start), size) == (0, n) else slice(int(start), int(start) + size))
                elif isinstance(item, _Expr) and not item.ins and item.shape == () and item.idx is not None:
                    try:
                        items.append(int(item.idx))
                    except ValueError:
                        items.append(Index(item.idx))
                elif dynamic and last and offsets is None and getattr(item, "shape", None) == ():
                    offsets = _Offsets(pos, item, n, lambda k: k)
                    items.append(None)
                else:
                    raise Unsupported(device)
            if offsets is not None:
                return v, items, offsets
            v = v._view(tuple(items))
        return v

    def at_offsets(self, base, items, offsets):
        """A load or store at an offset computed on the device: the offset
        in an s32 buffer, and the view at each offset it may take; a switch
        on it clamps, as JAX clamps a dynamic slice into its operand."""
        if offsets.count > MAX_OFFSETS:
            raise Unsupported(f"a load or store at one of {offsets.count} offsets computed on the device (at most {MAX_OFFSETS})")
        if offsets.count < 1:
            raise Unsupported("a slice larger than its operand")
        index = self.written(offsets.index, (), np.int32)
        views = []
        for k in range(offsets.count):
            its = list(items)
            its[offsets.pos] = offsets.item(k)
            views.append(base._view(tuple(its)))
        return index, views

    def switch_on(self, index, views, each):
        """A switch on `index` whose branch k runs each(views[k])."""
        blocks = [self.t.region(f"branches/{k}", lambda v=v: each(v)) for k, v in enumerate(views)]
        self.t.emit({"op": "switch", "index": index.text, "branches": blocks}, reads=[index])

    def load_at(self, base, items, offsets):
        index, views = self.at_offsets(base, items, offsets)
        out = self.scratch(views[0].shape, views[0].dtype)
        self.switch_on(index, views, lambda v: self.store(v, out))
        return out

    def store_at(self, base, items, offsets, value, old=False):
        """Stores `value` at the offset; with `old`, returns what was there."""
        index, views = self.at_offsets(base, items, offsets)
        value = self.written(value, views[0].shape, views[0].dtype)
        kept = self.scratch(views[0].shape, views[0].dtype) if old else None

        def each(v):
            if kept is not None:
                self.store(v, kept)
            self.store(value, v)

        self.switch_on(index, views, each)
        return kept

    def dynamic_slice(self, name, ins, p, aval):
        """lax.dynamic_slice and dynamic_update_slice (x[i] with i traced):
        each start is clamped so that the slice fits, as JAX does; one
        computed on the device is a switch over its offsets."""
        update = name == "dynamic_update_slice"
        operand = self.written(ins[0])
        starts = ins[2:] if update else ins[1:]
        sizes = ins[1].shape if update else tuple(p["slice_sizes"])
        items, offsets = [], None
        for pos, (start, size, n) in enumerate(zip(starts, sizes, operand.shape)):
            static = start.idx if isinstance(start, _Expr) and not start.ins else None
            try:
                k = min(max(int(static), 0), n - size)
                items.append(slice(None) if (k, size) == (0, n) else slice(k, k + size))
                continue
            except (TypeError, ValueError):
                pass
            if offsets is not None:
                raise Unsupported(f"{name} at offsets computed on the device along two dimensions")
            offsets = _Offsets(pos, start, n - size + 1, lambda k, size=size: slice(k, k + size))
            items.append(None)
        if not update:
            if offsets is None:
                return operand._view(tuple(items))
            return self.load_at(operand, items, offsets)
        out = self.scratch(aval.shape, aval.dtype)
        self.store(operand, out)
        if offsets is None:
            self.store(ins[1], out._view(tuple(items)))
        else:
            self.store_at(out, items, offsets, ins[1])
        return out

    # ---- non-elementwise
    def transpose(self, src, perm, dst):
        self.t.emit({"op": "transpose", "src": src.text, "dst": dst.text, "perm": list(perm)}, reads=[src], writes=[dst])
        return dst

    def _only_gemms_read(self, var):
        """Whether every use of `var` in this jaxpr is a dot_general operand."""
        jaxpr = self.scope[0]
        if any(v is var for v in jaxpr.outvars):
            return False
        uses = self.uses(var)
        return bool(uses) and all(e.primitive.name == "dot_general" for _, e in uses)

    def dot(self, ins, p, aval):
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        # A transposed operand is its source with the GEMM's flag flipped.
        flip_a, flip_b = (isinstance(v, _Transposed) for v in ins[:2])
        a, b = (v.src if isinstance(v, _Transposed) else self.written(v) for v in ins[:2])
        batch = len(lb)
        if len(lc) != 1 or len(rc) != 1 or batch > 1 or (batch and (tuple(lb) != (0,) or tuple(rb) != (0,))):
            raise Unsupported("dot_general with these dimension numbers")
        if len(a.shape) != 2 + batch or len(b.shape) != 2 + batch:
            raise Unsupported("dot_general of vectors")
        ta = (lc[0] == batch) != flip_a  # A's contraction first: op(A) = A^T
        tb = (rc[0] == batch + 1) != flip_b
        uses = self.uses(self._eqn.outvars[0])
        if not batch and len(uses) == 1 and uses[0][1].primitive.name == "transpose" and tuple(uses[0][1].params["permutation"]) == (1, 0) \
                and not any(v is self._eqn.outvars[0] for v in self.scope[0].outvars):
            # Its one use is a transpose: (op(A) op(B))^T = op(B)^T op(A)^T, one GEMM with the operands swapped.
            t = uses[0][1]
            c = self.result(t, t.outvars[0].aval.shape, aval.dtype)
            self.t.emit({"op": "gemm", "a": b.text, "b": a.text, "c": c.text, "transpose_a": not tb, "transpose_b": not ta},
                        reads=[a, b], writes=[c])
            self.transposed[t.outvars[0]] = c
            return c  # read by nothing but that transpose
        c = self.result(self._eqn, aval.shape, aval.dtype)
        self.t.emit({"op": "gemm", "a": a.text, "b": b.text, "c": c.text, "transpose_a": bool(ta), "transpose_b": bool(tb)},
                    reads=[a, b], writes=[c])
        return c

    def reduce(self, v, fn, axes, aval):
        src = self.written(v)
        out = self.result(self._eqn, aval.shape, aval.dtype)
        self.t.emit({"op": "reduce", "out": out.text, "in": src.text, "fn": fn, "axes": [int(x) for x in axes]},
                    reads=[src], writes=[out])
        return out

    def _axis(self, names):
        names = [names] if isinstance(names, str) else list(names)
        for n in names:
            if not isinstance(n, str):
                raise Unsupported("a collective over positional axes")
            self.t.check_axis(n, self.where)
        return names[0] if len(names) == 1 else names

    def all_reduce(self, ins, reduction, p, eqn):
        if p.get("axis_index_groups") is not None:
            raise Unsupported("axis_index_groups")
        outs = []
        for v, var in zip(ins, eqn.outvars):
            src = self.written(v)
            dst = self.scratch(var.aval.shape, var.aval.dtype)
            self.t.emit({"op": "all_reduce", "src": src.text, "dst": dst.text, "axis": self._axis(p["axes"]),
                         "reduction": reduction}, reads=[src], writes=[dst])
            outs.append(dst)
        return outs

    def collective(self, name, v, p, aval):
        src = self.written(v)
        dst = self.result(self._eqn, aval.shape, aval.dtype)
        if name == "all_gather":
            if p.get("all_gather_dimension", 0) != 0 or not p.get("tiled", False):
                raise Unsupported("all_gather other than tiled along dimension 0")
            cmd = {"op": "all_gather", "axis": self._axis(p["axis_name"])}
        elif name in ("psum_scatter", "reduce_scatter"):
            if p.get("scatter_dimension", 0) != 0 or not p.get("tiled", False):
                raise Unsupported("psum_scatter other than tiled along dimension 0")
            cmd = {"op": "reduce_scatter", "axis": self._axis(p["axis_name"]), "reduction": "sum"}
        elif name == "ppermute":
            cmd = {"op": "collective_permute", "axis": self._axis(p["axis_name"]), "pairs": [list(map(int, q)) for q in p["perm"]]}
        else:
            if p.get("split_axis", 0) != 0 or p.get("concat_axis", 0) != 0:
                raise Unsupported("all_to_all other than along dimension 0")
            cmd = {"op": "all_to_all", "axis": self._axis(p["axis_name"])}
        if p.get("axis_index_groups") is not None:
            raise Unsupported("axis_index_groups")
        cmd.update(src=src.text, dst=dst.text)
        self.t.emit(cmd, reads=[src], writes=[dst])
        return dst

    def kernel(self, eqn, ins, why):
        """An opaque kernel for what call_jax does not lower: priced by the
        bytes it reads and writes, refused by execute."""
        reads = [self.written(v) for v in ins if isinstance(v, (Ref, _Expr, _Transposed)) and (not isinstance(v, _Expr) or v.ins)]
        if len(eqn.outvars) == 1 and eqn.primitive.name not in ("swap", "addupdate"):
            outs = [self.result(eqn, eqn.outvars[0].aval.shape, eqn.outvars[0].aval.dtype)]
        else:
            outs = [self.scratch(var.aval.shape, var.aval.dtype) for var in eqn.outvars]
        if eqn.primitive.name in ("swap", "addupdate") and isinstance(ins[0], Ref):
            outs.append(ins[0])  # a store it cannot place: it may write any of the Ref
        flops, nbytes = _cost_analysis(eqn)
        if flops is None:  # an element of work for each output element, and the bytes moved
            flops = float(sum(math.prod(var.aval.shape) for var in eqn.outvars))
            nbytes = float(sum(math.prod(r.shape) * r.dtype.itemsize for r in reads + outs))
        pointer = self.t.emit({"op": "kernel", "name": eqn.primitive.name, "reads": [r.text for r in reads],
                               "writes": [o.text for o in outs], "cost": {"flops": flops, "bytes": nbytes}},
                              reads=reads, writes=outs)
        hint = _ALTERNATIVES.get(eqn.primitive.name)
        self.t.opaque.append((pointer, eqn.primitive.name, f"{why}; instead: {hint}" if hint else why, self.where))
        return outs


def _cost_analysis(eqn):
    """(flops, bytes) of one primitive as XLA's cost analysis counts them
    on this host, or (None, None) where it gives none."""
    if any(type(v.aval).__name__ == "AbstractRef" for v in eqn.invars):
        return None, None
    try:
        import jax
        avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
        cost = jax.jit(lambda *xs: eqn.primitive.bind(*xs, **eqn.params)).lower(*avals).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        flops, nbytes = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
        return (max(flops, 1.0), nbytes) if nbytes > 0 else (None, None)
    except Exception:  # a primitive that will not compile alone: the estimate
        return None, None



# ---- the rules: primitive name -> rule(lowering, eqn, ins, params, aval),
# which returns the equation's results (Refs or expressions), or raises
# Unsupported for what it cannot lower (an opaque kernel then). As JAX
# registers a primitive's lowering, a new primitive is one rule here.
RULES = {}


def rule(*names):
    def register(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return register


@rule("jit", "pjit", *_INLINE)
def _inline(lw, eqn, ins, p, aval):
    if eqn.primitive.name in ("jit", "pjit") and p.get("name") in ("remainder", "floor_divide") and len(ins) == 2 \
            and all(np.dtype(v.aval.dtype).kind in "iu" for v in eqn.invars):
        # jnp's % and // on integers are thunky's: Python's floor semantics.
        op = "%" if p["name"] == "remainder" else "//"
        return [lw.combine("({0} " + op + " {1})", ins, aval, idx_form="({0} " + op + " {1})")]
    key = _INLINE.get(eqn.primitive.name)
    if key not in p:
        raise Unsupported(eqn.primitive.name)
    closed = p[key]
    inner = getattr(closed, "jaxpr", closed)
    consts = getattr(closed, "consts", getattr(closed, "literals", []))
    return lw.run(inner, consts, ins)


@rule("get")
def _get(lw, eqn, ins, p, aval):
    v = lw.view(ins[0], eqn, ins[1:], dynamic=True)
    if isinstance(v, tuple):
        return [lw.load_at(*v)]
    b = v._buffer
    if getattr(b, "axis_index", None) and v.shape == ():
        b.read_as_axis = True  # this rank's index: the axis' name, in expressions and views
        return [_Expr(b.axis_index, {}, (), v.dtype, atomic=True, idx=b.axis_index)]
    return [v]


@rule("swap")
def _swap(lw, eqn, ins, p, aval):
    target = lw.view(ins[0], eqn, ins[2:], dynamic=True)
    if isinstance(target, tuple):
        return [lw.store_at(*target, ins[1], old=bool(eqn.outvars) and id(eqn.outvars[0]) in lw.used)]
    old = None
    if eqn.outvars and id(eqn.outvars[0]) in lw.used:  # the old value is used: keep it apart first
        old = lw.scratch(target.shape, target.dtype)
        lw.store(target, old)
    lw.store(ins[1], target)
    return [old]


@rule(*_IDENTITY)
def _identity(lw, eqn, ins, p, aval):
    return [ins[0]]


def _elementwise(form, idx=False):
    """A rule that fuses the primitive into the expression `form` of its
    operands ({0}, {1}, ...); with idx, it is also a ref index expression."""
    return lambda lw, eqn, ins, p, aval: [lw.combine(form, ins, aval, idx_form=form if idx else None)]


for _name, _f in _UNARY.items():
    RULES[_name] = _elementwise(_f + "({0})")
for _name, _op in _BINARY.items():
    RULES[_name] = _elementwise("({0} " + _op + " {1})", idx=_name in ("add", "add_any", "sub", "mul"))
RULES.update({
    "neg": _elementwise("(-{0})"),
    "logistic": _elementwise("(1.0 / (1.0 + exp(-{0})))"),
    "square": _elementwise("({0} * {0})"),
    "sign": _elementwise("where({0} > 0, 1, where({0} < 0, -1, 0))"),
    "max": _elementwise("max({0}, {1})", idx=True),
    "min": _elementwise("min({0}, {1})", idx=True),
    # C's remainder: the dividend's sign.
    "rem": _elementwise("({0} - {1} * where(({0} / {1}) < 0, ceil({0} / {1}), floor({0} / {1})))"),
})


@rule("integer_pow")
def _integer_pow(lw, eqn, ins, p, aval):
    return [lw.combine("({0} ** " + str(int(p["y"])) + ")", ins, aval)]


@rule("and", "or", "not")
def _logical(lw, eqn, ins, p, aval):
    name = eqn.primitive.name
    if np.dtype(aval.dtype) != np.bool_:
        raise Unsupported(f"bitwise {name} on {aval.dtype}: thunky's maps have logical and, or and not on bools only")
    return [lw.combine("(not {0})" if name == "not" else "({0} " + name + " {1})", ins, aval)]


@rule("div")
def _div(lw, eqn, ins, p, aval):
    if np.dtype(aval.dtype).kind in "iu":  # C division: toward zero
        return [lw.combine("where(({0} / {1}) < 0, ceil({0} / {1}), floor({0} / {1}))", ins, aval)]
    return [lw.combine("({0} / {1})", ins, aval)]


@rule("select_n")
def _select_n(lw, eqn, ins, p, aval):
    if len(ins) != 3:
        raise Unsupported("select_n of more than two cases: use jnp.where, or lax.switch")
    return [lw.combine("where({0}, {2}, {1})", ins, aval)]


@rule("convert_element_type")
def _convert(lw, eqn, ins, p, aval):
    e = lw.as_expr(ins[0])
    idx = e.idx if np.dtype(aval.dtype).kind in "iu" else None
    return [_Expr(f"{dtype_name(aval.dtype)}({e.text})", e.ins, e.shape, aval.dtype, e.depth + 1, atomic=True, idx=idx)]


@rule("slice")
def _slice(lw, eqn, ins, p, aval):
    if not isinstance(ins[0], Ref) or any(s not in (None, 1) for s in (p.get("strides") or ())):
        raise Unsupported("slice of a computed value, or with a stride: slice a Ref (x_ref[2:6]), which is a view")
    items = tuple(slice(None) if (a, b) == (0, n) else slice(a, b) for a, b, n in zip(p["start_indices"], p["limit_indices"], ins[0].shape))
    return [ins[0]._view(items)]


@rule("broadcast_in_dim", "reshape", "squeeze", "expand_dims")
def _reshape(lw, eqn, ins, p, aval):
    if eqn.primitive.name == "broadcast_in_dim":
        wide = lw.broadcast(ins[0], p["broadcast_dimensions"], aval)
        if wide is not None:
            return [wide]
    return [lw.reshape(ins[0], aval)]


@rule("platform_index")
def _platform_index(lw, eqn, ins, p, aval):
    # lax.platform_dependent: thunky runs and prices the CPU's branch (the default where none names the CPU).
    # An entry of None is the default branch (jnp.diagonal's platform_dependent names ('mosaic',) and None).
    platforms = p["platforms"]
    k = next((i for i, names in enumerate(platforms) if names is not None and "cpu" in names), None)
    if k is None:
        k = next((i for i, names in enumerate(platforms) if names is None), len(platforms) if p.get("has_default") else 0)
    return [_Expr(str(k), {}, (), aval.dtype, atomic=True, idx=str(k))]


@rule("axis_index")
def _axis_index(lw, eqn, ins, p, aval):
    lw.t.check_axis(p["axis_name"], lw.where)
    return [_Expr(p["axis_name"], {}, (), aval.dtype, atomic=True, idx=p["axis_name"])]


RULES.update({
    "cond": lambda lw, eqn, ins, p, aval: lw.cond(eqn, ins),
    "while": lambda lw, eqn, ins, p, aval: lw.while_(eqn, ins),
    "scan": lambda lw, eqn, ins, p, aval: lw.scan(eqn, ins),
    "dynamic_slice": lambda lw, eqn, ins, p, aval: [lw.dynamic_slice(eqn.primitive.name, ins, p, aval)],
    "dynamic_update_slice": lambda lw, eqn, ins, p, aval: [lw.dynamic_slice(eqn.primitive.name, ins, p, aval)],
    "dot_general": lambda lw, eqn, ins, p, aval: [lw.dot(ins, p, aval)],
})


@rule("iota")
def _iota(lw, eqn, ins, p, aval):
    if p.get("sharding") is not None:
        raise Unsupported("a sharded iota")
    shape, d = tuple(p["shape"]), p["dimension"]
    values = np.broadcast_to(np.arange(shape[d]).reshape([-1 if k == d else 1 for k in range(len(shape))]), shape)
    return [lw.t.new_constant("cj_iota", np.ascontiguousarray(values, dtype=p["dtype"]))]


@rule("transpose")
def _transpose(lw, eqn, ins, p, aval):
    if eqn.outvars[0] in lw.transposed:  # the GEMM before computed it transposed
        return [lw.transposed.pop(eqn.outvars[0])]
    perm = tuple(int(d) for d in p["permutation"])
    src = lw.written(ins[0])
    if perm in ((1, 0), (0, 2, 1)) and lw._only_gemms_read(eqn.outvars[0]):
        return [_Transposed(src, perm, aval.shape, aval.dtype)]  # folded into the GEMMs' transpose flags
    return [lw.transpose(src, perm, lw.result(eqn, aval.shape, aval.dtype))]


@rule(*_REDUCE, "argmax", "argmin")
def _reduce(lw, eqn, ins, p, aval):
    # argmax and argmin: one axis; the index of the first extreme (the first NaN), as thunky's own.
    name = eqn.primitive.name
    return [lw.reduce(ins[0], _REDUCE.get(name, name), p["axes"], aval)]


@rule(*_REDUCING)
def _all_reduce(lw, eqn, ins, p, aval):
    return lw.all_reduce(ins, _REDUCING[eqn.primitive.name], p, eqn)


@rule("gather")
def _gather(lw, eqn, ins, p, aval):
    """Rows of a Ref at indices known when tracing that run on, one after
    another (x[jnp.arange(2, 6)], jnp.take(x, jnp.arange(4), axis=0)): the
    view of those rows. Any other gather stays opaque."""
    src, idx = ins[0], ins[1]
    if isinstance(src, _Const):
        src = lw.constant(src.value)
    d = p["dimension_numbers"]
    rows = isinstance(idx, _Const) and isinstance(src, Ref) and tuple(d.collapsed_slice_dims) == (0,) \
        and tuple(d.start_index_map) == (0,) and not tuple(d.operand_batching_dims) and tuple(p["slice_sizes"]) == (1,) + tuple(src.shape[1:]) \
        and idx.value.ndim == 2 and idx.value.shape[1] == 1 and tuple(d.offset_dims) == tuple(range(1, len(src.shape)))
    if rows:
        start, n = int(idx.value[0, 0]), idx.value.shape[0]
        if n and np.array_equal(idx.value[:, 0], np.arange(start, start + n)) and 0 <= start and start + n <= src.shape[0]:
            return [src._view((slice(start, start + n),))]
    raise Unsupported("gather at indices computed on the device, or not a run of rows")


@rule("thunky_call")
def _thunky_call(lw, eqn, ins, p, aval):
    # A thunky.jit function called inside fn: a call of its schedule function on these Refs.
    p["jf"]._call(lw.t, [v if isinstance(v, Ref) else lw.written(v) for v in ins])
    return []


@rule("all_gather", "psum_scatter", "reduce_scatter", "ppermute", "all_to_all")
def _collective(lw, eqn, ins, p, aval):
    return [lw.collective(eqn.primitive.name, ins[0], p, aval)]


def call_jax(fn, *args):
    """Calls the JAX function `fn` inside a thunky.jit function, as
    upstream: Ref arguments arrive as Refs (read with `ref[...]`, written
    with `ref[...] = value`), `ref[:]` values as arrays; arrays fn returns
    come back as new Refs (one, or a tuple)."""
    t = _trace.active()
    if t is None:
        raise RuntimeError(_source.here("thunky.call_jax is called inside a thunky.jit function"))
    try:
        import jax
        from jax.ref import AbstractRef
    except ImportError:
        raise ImportError(_source.here("thunky.call_jax needs JAX: pip install -e python[jax]")) from None
    where = _source.caller()
    avals, values = [], []
    for k, a in enumerate(args):
        if isinstance(a, Ref):
            avals.append(AbstractRef(jax.core.ShapedArray(a.shape, a.dtype)))
            values.append(a)
        elif isinstance(a, _Read):
            avals.append(jax.ShapeDtypeStruct(a.ref.shape, a.ref.dtype))
            values.append(a.ref)
        elif np.isscalar(a) or isinstance(a, np.ndarray):
            avals.append(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype))
            values.append(None)
        else:
            raise TypeError(f"{where[0]}:{where[1]}: call_jax's argument {k} is a Ref, ref[:] or an array, not {type(a).__name__}")
    try:
        closed = jax.make_jaxpr(fn, axis_env=list(t.mesh.items()))(*avals)
    except Exception as e:  # fn's own error, at the user's line
        raise type(e)(f"{where[0]}:{where[1]}: call_jax: tracing {getattr(fn, '__name__', 'fn')}: {e}") from None
    lower = Lowering(t, where)
    inputs = []
    for a, v in zip(args, values):
        inputs.append(v if v is not None else lower.constant(np.asarray(a)))
    outs = lower.run(closed.jaxpr, closed.consts, inputs)
    refs = []
    for var, v in zip(closed.jaxpr.outvars, outs):
        if isinstance(v, Ref) and id(v) in lower.fresh and v.shape == tuple(var.aval.shape) and v not in refs:
            refs.append(v)
            continue
        dst = lower.scratch(var.aval.shape, var.aval.dtype)
        lower.store(v, dst)
        refs.append(dst)
    if not refs:
        return None
    return refs[0] if len(refs) == 1 else tuple(refs)
