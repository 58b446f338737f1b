"""The rewrites of the Inductor graph pass (``w8a8.fusion.inductor``), numbered as there:
(1) ``merge_siblings``, (2) ``fold_residual_adds``, (3) ``use_producer_codes`` (and
``count_module_producers``), (4) ``share_quantization``, and the helpers they share for
reading and writing an FX graph. Each rewrite takes the graph and a ``Counter`` of the
pass's ``COUNTER_KEYS`` and edits the graph in place.

The pass's uuid (Inductor's cache key) hashes this file with ``inductor.py``: a change here
is a new pass.
"""
from __future__ import annotations

import operator
from collections import Counter
from contextlib import nullcontext

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

import w8a8.ops  # noqa: F401  (defines the w8a8 ops this pass emits)

aten = torch.ops.aten
# Ops that keep a tensor's logical (row-major) element order: x.reshape(-1, K) of any node
# reached through them is the same matrix.
_VIEWS = {
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
}


# --- reading the graph ------------------------------------------------------------------------


def _is(node, *targets) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _tensor(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _known(cond) -> bool:
    """Whether a condition on sizes (ints or SymInts) is known true without adding a guard."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return statically_known_true(cond)


def _same(a, b) -> bool:
    return _known(a == b)


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() and all(_same(x, y) for x, y in zip(a.shape, b.shape))


def _source(node: fx.Node) -> fx.Node:
    while _is(node, *_VIEWS):
        node = node.args[0]
    return node


def _binary(node, target):
    """(a, b) of ``target(a, b)`` with no other arguments, else None."""
    if _is(node, target) and len(node.args) == 2 and not node.kwargs:
        return node.args
    return None


def _rows_ok(t: torch.Tensor) -> bool:
    """What the fused ops take as a row input: unit stride along the last dim, 1 <= K <= MAX_K."""
    from w8a8.validate import MAX_K

    k = t.shape[-1]
    return isinstance(k, int) and 1 <= k <= MAX_K and (k == 1 or t.stride(-1) == 1)


def _residual_add(x: fx.Node):
    """(a, b) where x = a + b, both of x's dtype and shape (no broadcast, no alpha), else None."""
    pair = _binary(x, aten.add.Tensor)
    xt = _tensor(x)
    if pair is None or xt is None:
        return None
    for t in map(_tensor, pair):
        if t is None or t.dtype != xt.dtype or not _same_shape(t, xt) or not _rows_ok(t):
            return None
    return pair


# --- writing the graph ------------------------------------------------------------------------


def _emit(graph: fx.Graph, target, args, kwargs=None, meta_from: fx.Node | None = None) -> fx.Node:
    """A call_function node at the graph's insertion point, with meta["val"] from the op's fake."""
    from torch._guards import detect_fake_mode

    kwargs = kwargs or {}
    node = graph.call_function(target, tuple(args), kwargs)
    vargs, vkwargs = fx.node.map_arg((tuple(args), kwargs), lambda n: n.meta["val"])
    if target is operator.getitem:
        node.meta["val"] = vargs[0][vargs[1]]
    else:
        mode = detect_fake_mode([v for v in pytree.tree_leaves((vargs, vkwargs)) if isinstance(v, torch.Tensor)])
        with mode if mode is not None else nullcontext():
            node.meta["val"] = target(*vargs, **vkwargs)
    if meta_from is not None:
        for key in ("stack_trace", "nn_module_stack"):
            if key in meta_from.meta:
                node.meta[key] = meta_from.meta[key]
    return node


def _replace(graph: fx.Graph, node: fx.Node, new: fx.Node) -> None:
    """node's readers read ``new``; node and what only it read are erased."""
    node.replace_all_uses_with(new)
    _erase_dead(graph, [node])


def _erase_dead(graph: fx.Graph, nodes) -> None:
    """Erase the given nodes where they have no readers left, then their inputs likewise: only
    what the pass made dead goes (Inductor's own dead-code elimination is off by default)."""
    work = list(nodes)
    while work:
        node = work.pop()
        if node.op == "call_function" and not node._erased and not node.users and not node.is_impure():
            work.extend(node.all_input_nodes)
            graph.erase_node(node)


def _outputs(graph: fx.Graph, node: fx.Node, n: int) -> list[fx.Node]:
    return [_emit(graph, operator.getitem, (node, i)) for i in range(n)]


def _size_arg(graph: fx.Graph, x: fx.Node, d: int):
    """x's size along d as a reshape argument: an int, the graph input holding that SymInt,
    or aten.sym_size of x."""
    size = _tensor(x).shape[d]
    if isinstance(size, int):
        return size
    for n in (n for n in graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node.expr == size.node.expr:
            return n
    return _emit(graph, aten.sym_size.int, (x, d))


def _sizes(graph: fx.Graph, x: fx.Node, last: int) -> list:
    """A reshape size: x's leading sizes, then ``last``. One symbolic size is written -1
    (unless another size is 0), so the reshape need not read x (which may be a producer the
    pass made dead)."""
    lead = list(_tensor(x).shape[:-1])
    symbolic = [d for d, s in enumerate(lead) if not isinstance(s, int)]
    if len(symbolic) == 1 and all(s != 0 for s in lead if isinstance(s, int)):
        lead[symbolic[0]] = -1
    else:
        lead = [_size_arg(graph, x, d) for d in range(len(lead))]
    return lead + [last]


def _linear_args(lin: fx.Node):
    args = list(lin.args) + [None] * (6 - len(lin.args))
    for i, name in enumerate(("x", "weight", "weight_scale", "bias", "input_scale", "input_zero_point")):
        if name in lin.kwargs:
            args[i] = lin.kwargs[name]
    return args


def _dynamic_linear(lin: fx.Node) -> bool:
    x, w, ws, bias, scale, zp = _linear_args(lin)
    return scale is None and zp is None and _tensor(x) is not None and _tensor(w) is not None


def _gemm_on_codes(graph: fx.Graph, lin: fx.Node, codes2d: fx.Node, scales2d: fx.Node) -> None:
    """Replace the linear ``lin`` by scaled_mm on the given codes, viewed as its output."""
    x, w, ws, bias, _, _ = _linear_args(lin)
    with graph.inserting_before(lin):
        mm_args = (codes2d, w, scales2d, ws, bias, _tensor(x).dtype)
        mm = _emit(graph, torch.ops.w8a8.scaled_mm.default, mm_args, meta_from=lin)
        out = _emit(graph, aten.reshape.default, (mm, _sizes(graph, x, _tensor(w).shape[0])), meta_from=lin)
    _replace(graph, lin, out)


def _as_2d(graph: fx.Graph, codes: fx.Node, scales: fx.Node) -> tuple[fx.Node, fx.Node]:
    k = _size_arg(graph, codes, -1)
    return _emit(graph, aten.reshape.default, (codes, [-1, k])), _emit(graph, aten.reshape.default, (scales, [-1, 1]))


def _linears(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if _is(n, torch.ops.w8a8.linear.default)]


def _by_source(graph: fx.Graph) -> dict[fx.Node, list[fx.Node]]:
    """Dynamic linears by the node their x is a view of, in graph order: the linears whose x,
    as [-1, K], is that node as [-1, its last dim]. A symbolic last dim is K at run time
    (w8a8.linear checks it; so does scaled_mm after the pass)."""
    groups: dict[fx.Node, list[fx.Node]] = {}
    for lin in _linears(graph):
        if _dynamic_linear(lin):
            x, w = _linear_args(lin)[:2]
            k, last = _tensor(w).shape[1], _tensor(x).shape[-1]
            src = _source(x)
            st = _tensor(src)
            if st is not None and st.dim() > 0 and not _known(k != last) and _same(st.shape[-1], last):
                groups.setdefault(src, []).append(lin)
    return groups


# --- (1) merged siblings ----------------------------------------------------------------------


def _row_slice(node):
    """(base, start, end) where node = base[start:end] along dim 0 (ints, step 1), else None."""
    if not _is(node, aten.slice.Tensor):
        return None
    args = list(node.args) + [0, None, None, 1][len(node.args) - 1:]
    base, dim, start, end, step = args[:5]
    bt = _tensor(base)
    if bt is None or dim not in (0, -bt.dim()) or step != 1:
        return None
    rows = bt.shape[0]
    start, end = 0 if start is None else start, rows if end is None else end
    if isinstance(rows, int) and isinstance(end, int):
        end = min(end, rows)
    elif isinstance(end, int) and end >= 2**62:  # "to the end" of a symbolic size
        return None
    if not (isinstance(start, int) and isinstance(end, int)):
        return None
    return (base, start, end) if 0 <= start < end else None


def _member(lin: fx.Node):
    """((bases), start, end) of a dynamic linear whose weight, scale (and bias) are one row slice of bases."""
    if not _dynamic_linear(lin):
        return None
    x, w, ws, bias = _linear_args(lin)[:4]
    parts = [_row_slice(w), _row_slice(ws)] + ([] if bias is None else [_row_slice(bias)])
    if any(p is None for p in parts) or len({p[1:] for p in parts}) != 1:
        return None
    bases = tuple(p[0] for p in parts) + ((None,) if bias is None else ())
    return bases, parts[0][1], parts[0][2]


def _slice_or_base(graph: fx.Graph, base: fx.Node, start: int, end: int) -> fx.Node:
    if start == 0 and _same(end, _tensor(base).shape[0]):
        return base
    return _emit(graph, aten.slice.Tensor, (base, 0, start, end))


def merge_siblings(graph: fx.Graph, counts: Counter) -> None:
    order = {n: i for i, n in enumerate(graph.nodes)}
    by_input: dict[tuple, list[tuple[int, int, fx.Node]]] = {}
    for lin in _linears(graph):
        found = _member(lin)
        if found is not None:
            bases, start, end = found
            by_input.setdefault((_linear_args(lin)[0], bases), []).append((start, end, lin))
    for (x, bases), members in by_input.items():
        members.sort(key=lambda m: m[0])
        run = [members[0]]
        for m in members[1:] + [None]:
            if m is not None and m[0] == run[-1][1]:
                run.append(m)
                continue
            if len(run) > 1 and _merge(graph, x, bases, run, order):
                counts["merged_groups"] += 1
                counts["merged_linears"] += len(run)
            run = [m]


def _merge(graph: fx.Graph, x: fx.Node, bases: tuple, run: list, order: dict) -> bool:
    """One linear over the run's union slice before its first member; the members read slices of its output."""
    first = min((lin for _, _, lin in run), key=order.__getitem__)
    if any(b is not None and order[b] > order[first] for b in bases):
        return False
    start, end = run[0][0], run[-1][1]
    with graph.inserting_before(first):
        args = [x] + [None if b is None else _slice_or_base(graph, b, start, end) for b in bases] + [None, None]
        merged = _emit(graph, torch.ops.w8a8.linear.default, args, meta_from=first)
        last = _tensor(merged).dim() - 1
        outs = [_emit(graph, aten.slice.Tensor, (merged, last, a - start, b - start), meta_from=lin)
                for a, b, lin in run]
    for (_, _, lin), out in zip(run, outs):
        _replace(graph, lin, out)
        _contiguous_outputs(graph, out)
    return True


def _contiguous_outputs(graph: fx.Graph, out: fx.Node) -> None:
    """Where ``out`` (a column slice) or a view of it leaves the graph, a contiguous copy leaves
    instead: a layer's output is contiguous, as the linear's was (Inductor keeps the strides
    the graph states for its outputs)."""
    for view in _views_of(out):
        for user in [u for u in view.users if u.op == "output"]:
            with graph.inserting_before(user):
                copy = _emit(graph, aten.clone.default, (view,), {"memory_format": torch.contiguous_format})
            user.replace_input_with(view, copy)


# --- (2) the residual add into the norm, (3) the norm's codes to its readers -------------------

_NORM_OPS = (torch.ops.w8a8.rms_norm_quant.default, torch.ops.w8a8.add_rms_norm_quant.default)


def fold_residual_adds(graph: fx.Graph, counts: Counter) -> None:
    """rms_norm_quant(a + b, w, eps) -> add_rms_norm_quant(a, b, w, eps): readers of the sum
    after the norm read the op's ``sum``; readers between the add and the norm keep the add."""
    for norm in [n for n in graph.nodes if _is(n, torch.ops.w8a8.rms_norm_quant.default)]:
        x, weight, eps = norm.args
        residual = _residual_add(x)
        if residual is None:
            continue
        between = set()
        node = x.next
        while node is not norm:
            between.add(node)
            node = node.next
        with graph.inserting_before(norm):
            fused = _emit(graph, torch.ops.w8a8.add_rms_norm_quant.default, (*residual, weight, eps), meta_from=norm)
            total = _emit(graph, operator.getitem, (fused, 3))
        for user in list(norm.users):  # getitem(norm, i) -> getitem(fused, i), i < 3
            user.replace_input_with(norm, fused)
        x.replace_all_uses_with(total, delete_user_cb=lambda user: user not in between and user is not norm)
        _erase_dead(graph, [norm, x])


def _item(graph: fx.Graph, node: fx.Node, i: int) -> fx.Node:
    """``node[i]`` of a multi-output op (its getitem node, or a new one), placed right after it."""
    item = next((u for u in node.users if _is(u, operator.getitem) and u.args[1] == i), None)
    if item is None:
        item = _emit(graph, operator.getitem, (node, i))
    node.append(item)
    return item


def use_producer_codes(graph: fx.Graph, counts: Counter) -> None:
    """Dynamic linears reading a fused norm's ``normed`` run ``scaled_mm`` on its codes."""
    for src, lins in _by_source(graph).items():
        if not (_is(src, operator.getitem) and src.args[1] == 2 and _is(src.args[0], *_NORM_OPS)):
            continue
        fused = src.args[0]
        codes, scales = _item(graph, fused, 0), _item(graph, fused, 1)
        with graph.inserting_before(lins[0]):
            codes2d, scales2d = _as_2d(graph, codes, scales)
        for lin in lins:
            _gemm_on_codes(graph, lin, codes2d, scales2d)
        counts["rms_norm_quant" if fused.target is torch.ops.w8a8.rms_norm_quant.default else "add_rms_norm_quant"] += 1
        counts["producer_linears"] += len(lins)


def count_module_producers(graph: fx.Graph, counts: Counter) -> None:
    """The SiLU-and-mul products (a ``QuantizingGatedMLP``'s) whose codes a GEMM reads."""
    for node in graph.nodes:
        if _is(node, torch.ops.w8a8.silu_mul_quant.default):
            gemms = {g for item in node.users for v in _views_of(item) for g in v.users
                     if _is(g, torch.ops.w8a8.scaled_mm.default) and g.args[0] is v}
            if gemms:
                counts["silu_mul_quant"] += 1
                counts["producer_linears"] += len(gemms)


def _views_of(node: fx.Node) -> list[fx.Node]:
    """node and the views of it (through _VIEWS), transitively."""
    found, work = [], [node]
    while work:
        n = work.pop()
        found.append(n)
        work.extend(u for u in n.users if _is(u, *_VIEWS) and u.args[0] is n)
    return found


# --- (4) one quantization per activation ------------------------------------------------------


def share_quantization(graph: fx.Graph, counts: Counter) -> None:
    for src, lins in _by_source(graph).items():
        if len(lins) < 2:
            continue
        with graph.inserting_before(lins[0]):
            x2d = _emit(graph, aten.reshape.default, (src, [-1, _size_arg(graph, src, -1)]))
            if _tensor(x2d).shape[-1] != 1 and _tensor(x2d).stride(-1) != 1:  # as w8a8.linear does
                x2d = _emit(graph, aten.clone.default, (x2d,), {"memory_format": torch.contiguous_format})
            quantized = _emit(graph, torch.ops.w8a8.quantize_per_token.default, (x2d,), meta_from=lins[0])
            codes2d, scales2d = _outputs(graph, quantized, 2)
        for lin in lins:
            _gemm_on_codes(graph, lin, codes2d, scales2d)
        counts["shared_quantizers"] += 1
        counts["shared_linears"] += len(lins)
