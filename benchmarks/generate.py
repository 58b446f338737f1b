"""Generation suite: transformers' ``LlamaForCausalLM`` at Llama-3-8B widths, bf16 vs W8A8, greedy generate.

    python -m benchmarks --suites generate [--layers 32] [--prompts 128,2048] [--batches 1,16,64]
                                           [--new-tokens 128] [--recipes graph,eager,hf-compile] [--out DIR]

* the models: ``model.build_model`` (random weights, bf16, SDPA), ``--layers`` decoder layers
  (default 32: Llama-3-8B's depth; the ratio depends on it, since lm_head stays bf16);
  W8A8 is a copy through ``quantize_model(skip=("lm_head",))``.
* each point: batch B of random prompts of P tokens, ``--new-tokens`` N greedy tokens.
* recipes, the same for both models:
  - ``graph``: ``w8a8.Generator(model, prefill_graphs=True)`` (the prompt's forward and the
    decode step captured in CUDA graphs, the step's rotary embedding, cache write and
    decode attention in Triton kernels; w8a8/generation.py). prefill: median wall time of
    REPEATS prompt replays (``prefill_eager_ms``: the same forward run eagerly); decode: median
    over REPEATS of the wall time of N - 1 steps as ``generate`` runs them (one replay and one
    token copy each, synchronised at the end), per token. ``step_gpu_us``: the sum of the
    CUDA kernel times of one eager step (the graph replays exactly those kernels; profiler,
    median of 3), and ``decode_over_kernels`` = decode time per token / step_gpu_us (1.0: no
    host overhead). The first call (both captures and one generate) takes ``capture_s``.
  - ``graph-plain``: the same with ``kernels=False`` (transformers' own rotary embedding and
    cache write, SDPA attention): what the kernels bring. Not in the default recipes.
  - ``eager``: ``model.generate(do_sample=False)`` as transformers runs it by default
    (dynamic cache, eager): after a warm-up, the median of REPEATS timed calls of
    EAGER_NEW_TOKENS tokens; decode per token is (that time - the median of REPEATS 1-token
    calls) / (EAGER_NEW_TOKENS - 1).
  - ``hf-compile``: transformers' own compiled decode (``cache_implementation="static"``:
    generate compiles the decode step, mode "reduce-overhead"), the same timing as eager,
    after one warm-up call of the same shapes (the compile). Not in the default recipes
    (minutes of compiles per shape); its failure, if any, is recorded in the row. N tokens.
  - ``mixed-sampled``: ``w8a8.Generator(model).generate`` as a server batch calls it: prompts of
    P down to about P/2 tokens (row i: P - i P / 2B) left-padded with ``attention_mask``,
    sampled (SAMPLING, a seeded generator), the same timing as eager (median of REPEATS calls of
    1 and of N tokens; decode per token from their difference), after one warm-up call (the
    captures); on a GPU the step's kernel time too, sampling included (the profiled kernel sum of
    N tokens less that of 1, per token), for ``decode_over_kernels``. Not in the default recipes.
* timing: both models are set up, then their timed calls are interleaved, REPEATS rounds of each
  model's calls in turn, so that the host's drift during a run reaches both alike (rows:
  ``interleaved``): eager at every point, graph and mixed-sampled up to INTERLEAVE_MAX_TOKENS
  (batch x (prompt + new tokens)); past it, and for ``hf-compile``, one model at a time. A recipe
  that raises (out of memory at the largest points, a failed compile) has the error as its row.
* tokens/s = B / decode time per token. ``token_match``: the fraction of W8A8's new tokens
  equal to bf16's at the same position (random weights: ties and near-ties are common, so
  this is a sanity figure, not an accuracy one).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
import traceback
from typing import Callable

import torch

from benchmarks import harness
from benchmarks.model import _sync

REPEATS = 3
RECIPES = ("graph", "graph-plain", "eager", "hf-compile", "mixed-sampled")
DEFAULT_RECIPES = ("graph", "eager")
PROMPTS = (128, 2048)
BATCHES = (1, 16, 64)
NEW_TOKENS = 128
# eager decode is bound by Python (about 0.1 s a token at 32 layers on the H100's host): fewer tokens time it
EAGER_NEW_TOKENS = 16
# Both models are set up and their timed calls interleaved round by round up to this many tokens
# (batch x (prompt + new tokens)), where the host sets the pace; past it, where the GPU does and two
# models' caches and graphs would not fit beside each other, one model at a time.
INTERLEAVE_MAX_TOKENS = 16384
LAYERS = 32
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 50, "top_p": 0.9}  # the mixed-sampled recipe's


def _wall(fn, device) -> float:
    """Wall time of fn() in ms, synchronised before and after."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


@dataclasses.dataclass
class _Point:
    """One model's recipe at one point, set up (warm-up call and captures done): the calls whose wall
    time is sampled (in this order each round), and what turns their medians into the row."""

    timed: dict[str, Callable[[], object]]
    finish: Callable[[dict[str, float]], tuple[dict, torch.Tensor | None]]
    release: Callable[[], None] = lambda: None
    failed: dict | None = None  # why the recipe failed (its set-up or a timed call raised): the row says so


def _failure() -> dict:
    """The row of a recipe that raised (called in its except block): the exception and where."""
    exc = sys.exc_info()[1]
    last = [line for line in traceback.format_exc().splitlines() if line.strip().startswith("File")][-1:]
    return {"failed": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}", "where": last}


def _time_points(points: dict[str, _Point], device) -> dict[str, dict[str, float]]:
    """{impl: {call: median wall ms}} over REPEATS rounds (harness.interleaved_medians): each round
    samples every point's calls in turn, so that a drift of the host's speed during a run reaches
    both models alike (the eager parts of these recipes are bound by the host). A call that raises
    ends its point's timing ({} for it; the row records the failure)."""
    def guarded(point: _Point, fn) -> float:
        if point.failed is not None:
            return math.nan
        try:
            return _wall(fn, device)
        except Exception:  # noqa: BLE001 - the row records why the recipe failed
            point.failed = _failure()
            return math.nan

    calls = {(impl, name): (lambda p=p, fn=fn: guarded(p, fn))
             for impl, p in points.items() for name, fn in p.timed.items()}
    with torch.inference_mode():
        medians = harness.interleaved_medians(calls, lambda call: call(), REPEATS, warmup=0)
    return {impl: {} if p.failed else {name: medians[impl, name] for name in p.timed} for impl, p in points.items()}


def graph_point(model, ids: torch.Tensor, new_tokens: int, device, kernels: bool | None = None) -> _Point:
    """The ``graph`` (``graph-plain``: kernels=False) recipe at one point."""
    from benchmarks.model import breakdown, kernel_us
    from w8a8.generation import Generator

    gen = Generator(model, prefill_graphs=device.type == "cuda", kernels=kernels)
    batch, prompt = ids.shape
    t0 = time.perf_counter()
    tokens = gen.generate(ids, new_tokens)
    _sync(device)
    capture_s = time.perf_counter() - t0  # captures plus one generate call
    slot = gen.slot(batch, prompt + new_tokens)
    new = torch.empty(batch, new_tokens, dtype=torch.long, device=device)

    def steps():
        for i in range(1, new_tokens):
            gen.decode(slot)
            new[:, i] = slot.ids[:, 0]

    def finish(ms: dict[str, float]) -> tuple[dict, torch.Tensor]:
        decode_ms = ms["steps"] / (new_tokens - 1)
        row = {"prefill_ms": round(ms["prefill"], 3), "decode_ms": round(decode_ms, 4),
               "prefill_eager_ms": round(ms["prefill_eager"], 3),
               "tokens_per_s": round(batch / decode_ms * 1e3, 1), "capture_s": round(capture_s, 2),
               "kernels": gen.kernels,
               "step_gpu_us": None, "decode_over_kernels": None, "step_kernels": None}
        if device.type == "cuda":
            with torch.inference_mode():
                gen.prefill(slot, ids)
                b = breakdown(kernel_us(lambda: gen._step(slot), device, iters=3))
            row.update(step_gpu_us=b["gpu_us"], decode_over_kernels=round(decode_ms * 1e3 / b["gpu_us"], 3),
                       step_kernels={k: b[f"{k}_us"] for k in ("gemm_bf16", "gemm_w8a8", "quant", "fused_quant", "other")},
                       step_launches=b["kernels_per_forward"])
        return row, tokens[:, prompt:]

    # each round: the prompt eagerly, then its graph, then the steps from the state it leaves
    timed = {"prefill_eager": lambda: (slot.cache.reset(), gen._prefill_step(slot, ids)),
             "prefill": lambda: gen.prefill(slot, ids), "steps": steps}
    return _Point(timed, finish, gen.release)


def _one_and_n(run, new_tokens: int) -> tuple[dict[str, Callable[[], object]], Callable]:
    """generate's timing (eager, hf-compile, mixed-sampled): the calls ``run(1)`` (prefill) and
    ``run(new_tokens)``, and what makes their medians the row: decode per token from their
    difference (medians: one such difference went negative on a loaded 2-core CPU), and the last tokens."""
    out = {}
    timed = {"one": lambda: run(1), "n": lambda: out.__setitem__("tokens", run(new_tokens))}

    def finish(ms: dict[str, float]) -> tuple[dict, torch.Tensor]:
        decode_ms = (ms["n"] - ms["one"]) / (new_tokens - 1)
        tokens = out["tokens"]
        return {"prefill_ms": round(ms["one"], 3), "decode_ms": round(decode_ms, 4),
                "tokens_per_s": round(tokens.shape[0] / decode_ms * 1e3, 1)}, tokens
    return timed, finish


def mixed_point(model, ids: torch.Tensor, new_tokens: int, device) -> _Point:
    """The ``mixed-sampled`` recipe at one point: generate's wall time on a left-padded batch, sampled."""
    from w8a8.generation import Generator

    batch, prompt = ids.shape
    lengths = [prompt - i * prompt // (2 * batch) for i in range(batch)]
    mask = (torch.arange(prompt).unsqueeze(0) >= prompt - torch.tensor(lengths).unsqueeze(1)).long().to(device)
    ids = ids * mask  # padding: id 0
    gen = Generator(model)
    run = lambda n: gen.generate(ids, n, attention_mask=mask, generator=torch.Generator(device).manual_seed(0),  # noqa: E731
                                 **SAMPLING)
    t0 = time.perf_counter()
    run(new_tokens)
    _sync(device)
    capture_s = time.perf_counter() - t0
    timed, timing_row = _one_and_n(run, new_tokens)

    def finish(ms: dict[str, float]) -> tuple[dict, torch.Tensor]:
        row, tokens = timing_row(ms)
        if device.type == "cuda":  # a decode step's kernel time, sampling included: n tokens' sum less one's
            from benchmarks.model import kernel_us

            with torch.inference_mode():
                sums = [sum(us for us, _ in kernel_us(lambda n=n: run(n), device, iters=1).values())
                        for n in (new_tokens, 1)]
            step_us = (sums[0] - sums[1]) / (new_tokens - 1)
            row.update(step_gpu_us=round(step_us, 2), decode_over_kernels=round(row["decode_ms"] * 1e3 / step_us, 3))
        return {**row, "lengths": lengths, "capture_s": round(capture_s, 2)}, tokens[:, prompt:]
    return _Point(timed, finish, gen.release)


def hf_point(model, ids: torch.Tensor, new_tokens: int, device, compiled: bool) -> _Point:
    """The ``eager`` / ``hf-compile`` recipe at one point (model.generate)."""
    extra = {"cache_implementation": "static"} if compiled else {}
    new_tokens = new_tokens if compiled else min(new_tokens, EAGER_NEW_TOKENS)
    run = lambda n: model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,  # noqa: E731
                                   attention_mask=torch.ones_like(ids), **extra)
    timed, timing_row = _one_and_n(run, new_tokens)

    def finish(ms: dict[str, float]) -> tuple[dict, torch.Tensor]:
        row, tokens = timing_row(ms)
        return {**row, "timed_new_tokens": new_tokens}, tokens[:, ids.shape[1]:]
    with torch.inference_mode():
        run(new_tokens if compiled else 2)  # warm-up (compiled: the compile, at these shapes)
    return _Point(timed, finish)


def _point(recipe: str, model, ids: torch.Tensor, new_tokens: int, device) -> _Point:
    """The recipe set up on one model at one point; a set-up that raises (hf-compile's compile, memory
    at the largest points) is a point that records why instead."""
    try:
        if recipe == "mixed-sampled":
            return mixed_point(model, ids, new_tokens, device)
        if recipe.startswith("graph"):
            return graph_point(model, ids, new_tokens, device, kernels=False if recipe == "graph-plain" else None)
        torch._dynamo.reset()
        return hf_point(model, ids, new_tokens, device, compiled=recipe == "hf-compile")
    except Exception:  # noqa: BLE001 - the row records why the recipe failed
        return _Point({}, lambda ms: ({}, None), failed=_failure())


def _interleaved(recipe: str, batch: int, prompt: int, new_tokens: int) -> bool:
    """Whether both models' points are set up together and timed round by round: eager always (it
    holds nothing between calls, and its decode is bound by the host at every size); hf-compile never
    (each model's compile starts from a reset of dynamo's caches); the others up to INTERLEAVE_MAX_TOKENS."""
    if recipe == "eager":
        return True
    if recipe == "hf-compile":
        return False
    return batch * (prompt + new_tokens) <= INTERLEAVE_MAX_TOKENS


def run_suite(device, layers: int, prompts, batches, new_tokens: int, recipes, size: str | None = None,
              checkpoint=None):
    """Rows and the run's description; ``checkpoint(rows, described)`` after each point (partial files)."""
    import w8a8
    from benchmarks.model import build_model

    size = size or ("llama3-8b" if device.type == "cuda" else "tiny")
    bf16, config = build_model(size, layers, device)
    bf16.generation_config.eos_token_id = None  # N tokens every time (the copy below inherits it)
    bf16.generation_config.pad_token_id = 0
    bf16.generation_config.use_cache = True  # the demo's config says False (one forward per call); generate's default is True
    q = copy.deepcopy(bf16)
    w8a8.quantize_model(q, skip=("lm_head",), progress=False)
    models = {"bf16": bf16, "w8a8": q}
    described = {"kind": "generate", "model": "transformers LlamaForCausalLM, random weights, SDPA attention",
                 "size": size, "layers": layers, "lm_head": "bf16 (quantize_model skip)", "greedy": True,
                 "new_tokens": new_tokens, "eager_new_tokens": EAGER_NEW_TOKENS, "repeats": REPEATS,
                 "recipes": list(recipes)}
    gen = torch.Generator().manual_seed(0)
    rows = []
    for prompt in prompts:
        for batch in batches:
            ids = torch.randint(0, config.vocab_size, (batch, prompt), generator=gen).to(device)
            for recipe in recipes:
                tokens = {}
                together = _interleaved(recipe, batch, prompt, new_tokens)
                for group in ([list(models)] if together else [[impl] for impl in models]):
                    points = {impl: _point(recipe, models[impl], ids, new_tokens, device) for impl in group}
                    medians = _time_points(points, device)
                    for impl, point in points.items():
                        base = {"impl": impl, "recipe": recipe, "prompt": prompt, "batch": batch,
                                "new_tokens": new_tokens, "interleaved": together}
                        row, tokens[impl] = (point.failed, None) if point.failed else point.finish(medians[impl])
                        point.release()
                        rows.append({**base, **row})
                    del points
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                b, w = rows[-2], rows[-1]
                if "decode_ms" in b and "decode_ms" in w:
                    w["x_bf16_decode"] = round(b["decode_ms"] / w["decode_ms"], 3)
                    w["x_bf16_prefill"] = round(b["prefill_ms"] / w["prefill_ms"], 3)
                    w["token_match"] = round(float((tokens["bf16"] == tokens["w8a8"]).float().mean()), 4)
                    if "prefill_eager_ms" in b:
                        w["x_bf16_prefill_eager"] = round(b["prefill_eager_ms"] / w["prefill_eager_ms"], 3)
                print(markdown_table(rows[-2:], header=not rows[:-2]), flush=True)
                if checkpoint is not None:
                    checkpoint(rows, described)
    return rows, described


def markdown_table(rows: list[dict], header: bool = True) -> str:
    head = ["| prompt | batch | recipe | impl | prefill ms | decode ms/token | tokens/s | x bf16 decode | x bf16 prefill "
            "| decode / kernel sum | eager prefill ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda r, k, fmt: "-" if r.get(k) is None else format(r[k], fmt)  # noqa: E731
    lines = head if header else []
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['prompt']} | {r['batch']} | {r['recipe']} | {r['impl']} | failed: {r['failed'][:120]} "
                         "| | | | | | |")
            continue
        lines.append(f"| {r['prompt']} | {r['batch']} | {r['recipe']} | {r['impl']} | {r['prefill_ms']:.2f} | "
                     f"{r['decode_ms']:.3f} | {r['tokens_per_s']:.0f} | {f(r, 'x_bf16_decode', '.2f')} | "
                     f"{f(r, 'x_bf16_prefill', '.2f')} | {f(r, 'decode_over_kernels', '.2f')} | "
                     f"{f(r, 'prefill_eager_ms', '.2f')} |")
    return "\n".join(lines)


def run(args, device, ceilings: dict) -> list[dict]:
    """``python -m benchmarks --suites generate``: run, print, write ``generate_<tag>.json`` with ``--out``
    (rewritten after each point, so a run cut short leaves its finished points)."""
    recipes = tuple(args.recipes.split(",")) if args.recipes else DEFAULT_RECIPES
    unknown = set(recipes) - set(RECIPES)
    if unknown:
        raise SystemExit(f"benchmarks: unknown generate recipes {sorted(unknown)}; expected {list(RECIPES)}")
    layers = args.layers or (LAYERS if device.type == "cuda" else 2)
    write = None
    if args.out:
        write = lambda rows, described: harness.write_suite(args, "generate", rows, ceilings, described, device)  # noqa: E731
    rows, _ = run_suite(device, layers, args.prompts or (PROMPTS if device.type == "cuda" else (8,)),
                        args.batches or (BATCHES if device.type == "cuda" else (1, 2)),
                        args.new_tokens or (NEW_TOKENS if device.type == "cuda" else 4),
                        recipes, args.size, checkpoint=write)
    return rows
