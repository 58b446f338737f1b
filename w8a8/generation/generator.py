"""Greedy (and sampled) generation for transformers causal LMs with the decode step captured in a CUDA graph.

    gen = w8a8.Generator(model)                 # a transformers CausalLM, quantized or not
    tokens = gen.generate(input_ids, max_new_tokens=128)

Why a graph of the eager step, and not ``torch.compile``: in eager decode the GPU waits on
Python (hundreds of kernel launches a token), and transformers' compiled paths are not what
this package's fused eager modules are built for (docs/INFERENCE.md "Generation" says which
recipes fail and why). A CUDA graph replays the eager step's kernels exactly as recorded,
so the host cost per token is one graph launch and a token copy, and the logits are the
eager step's, bit for bit.

How, per (batch, cache length) "slot":

* a transformers ``StaticCache`` of ``cache_len`` positions (the prompt plus the new tokens,
  rounded up to CACHE_ROUND so that other prompt lengths reuse the slot) and static input
  buffers: the token ids [B, 1] and the position ids [1, 1];
* the step: ``model(input_ids, position_ids, cache=cache, logits_to_keep=1)``,
  the greedy token written back into the id buffer and the position advanced, all on the
  GPU; warmed up on a side stream, then captured; the cache is reset afterwards (``reset``
  zeroes it in place, so the graph's addresses stay valid);
* ``generate``: reset the cache, run the prompt eagerly (prefill, ``logits_to_keep=1``; or
  replay its own graph, one per prompt length, with ``prefill_graphs=True``), seed the
  buffers with its greedy token, then replay the decode graph once per new token. No
  host synchronisation inside the loop unless a stop rule or a streamer needs the tokens
  (``w8a8/generation/stops.py``): with ``eos_token_id``, ``stop_strings`` or ``max_time``
  they are read every STOP_CHECK tokens and once after the loop, with a ``streamer`` after
  every token.

Without a GPU (or with ``cuda_graph=False``) the same step runs eagerly: same cache, same
kernels, the reference the graph is tested against.

Attention (``steps.py``): while it runs, the model's "sdpa" attention is swapped for
ATTENTION, which is transformers' SDPA path except for one-token queries. With the kernels (``kernels``, on by
default on a GPU) those run ``w8a8.generation.kernels.decode_attention`` over the filled
part of the slot's cache (the layer's ``cumulative_length``, read on the device); without,
SDPA with the queries of each KV head as rows of one head ([B, H, 1, D] as [B, H_kv,
H / H_kv, D]) instead of copying every KV head H / H_kv times (transformers < 5.23 copies
the whole static cache that way every step). The kernels also replace, inside the steps,
the modeling module's ``apply_rotary_pos_emb`` (``_FusedRope``: bit-identical, checked on
its first call) and each ``StaticLayer``'s ``update`` (one ``cache_write`` launch). The same
for every model the Generator runs, quantized or not.

Sampling (``do_sample=True``: temperature, top-k, top-p) and the repetition penalty
(transformers' semantics, stated in ``w8a8/generation/sampling.py``) run after each step: the
decode graph is the greedy one, unchanged, and the token picked after it overwrites the greedy
one in the id buffer before the next replay. With graphs, sampling without a penalty is a
second graph per slot and sampling setting, replayed after the decode graph (the draws equal
the eager ones under the same generator state); a penalty runs eagerly. Greedy calls without
a penalty run none of it.

Prompts of different lengths go in one call left-padded, with transformers'
``attention_mask`` (``left_padding.py``: each row's tokens are those it gives alone; a padded
batch has a slot, and so graphs, of its own). A row that ended (an eos id, a
stop string) gets ``pad_token_id`` afterwards, as transformers' ``generate`` does. The
models it runs: transformers decoder-only causal LMs (an output head) with "sdpa" or
"eager" attention; the prompt and the new tokens within the model's
``max_position_embeddings``. Everything ``generate`` refuses, it refuses before any work.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import sys

import torch
from torch import nn

from w8a8.generation import config as gen_config
from w8a8.generation import left_padding, steps
from w8a8.generation.models import _cache_keyword, _check_model, _vocab_size
from w8a8.generation.sampling import Sampler
from w8a8.generation.steps import ATTENTION, _FusedRope, _fused_update, _register_attention
from w8a8.generation.stops import Stops, _error, _is_int

# Cache lengths are rounded up to a multiple of this, so prompts of other lengths reuse a slot
# (its graph and cache) instead of capturing again. The step reads the whole static cache
# (masked past the current position), so a larger round costs attention time.
CACHE_ROUND = 256
# prefill_graphs captures a prompt's forward only up to this many tokens (batch x prompt): past it
# the eager forward is bound by the GPU, not by Python, and the graph only holds memory.
# [evidence generation.prefill-graph-max-tokens]
PREFILL_GRAPH_MAX_TOKENS = 4096
# With eos_token_id, stop_strings or max_time (and no streamer): every this many new tokens the
# host reads the tokens (one synchronisation) to see which rows ended and whether all did.
STOP_CHECK = 16


@dataclasses.dataclass
class _Slot:
    """One batch size and cache length: the static cache, the step's buffers and (CUDA) its graph."""

    cache: object
    ids: torch.Tensor  # [B, 1] int64: the token the next step reads; the step writes its greedy token here
    position: torch.Tensor  # [1, 1] int64: that token's position
    logits: torch.Tensor | None = None  # [B, V]: the last step's logits (the graph's output buffer)
    graph: torch.cuda.CUDAGraph | None = None
    kernels: bool = False  # the steps run w8a8.generation.kernels's kernels (Generator's ``kernels``)
    # prefill_graphs: prompt length -> (graph, its input ids [B, P], its last logits [B, V])
    prefills: dict = dataclasses.field(default_factory=dict)
    # Sampler.graph_key -> the graph that picks the next token from ``logits`` into ``ids``
    samplers: dict = dataclasses.field(default_factory=dict)
    # A slot for left-padded batches (left_padding.py): each row's padding length [B, 1], the cache
    # positions [1, L] and the decode step's attention mask [B, 1, 1, L], rewritten every step.
    pads: torch.Tensor | None = None
    key_index: torch.Tensor | None = None
    mask: torch.Tensor | None = None


class Generator:
    """Greedy or sampled generation with one CUDA graph per (batch size, cache length); see the
    module docstring.

    Parameters
    ----------
    model : a transformers causal LM (``LlamaForCausalLM`` and the like) in eval mode, on one
        device; quantized with ``w8a8.quantize_model`` or not.
    cuda_graph : capture the decode step (default: when the model is on a CUDA device).
    prefill_graphs : also capture the prompt's forward, once per (batch, prompt length), for
        prompts of at most PREFILL_GRAPH_MAX_TOKENS tokens in all: for fixed prompt shapes
        (benchmarks, serving buckets), where the eager prompt forward is bound by Python rather
        than the GPU (at 2048 tokens and batch 1 on the H100, W8A8's eager prompt forward takes
        longer than bf16's). Each new prompt length costs a capture and keeps its activations
        in the graphs' memory pool until ``release``. Replays of a prompt's graph agree with
        each other bit for bit; against the eager prompt forward they differ by rounding (on
        the H100 the logits were 1 bf16 ulp apart from the first decoder layer's output on,
        bf16 and W8A8 models alike; the cause is not found). The decode graph is bit-identical
        to the eager step.
    kernels : run the steps' rotary embedding, cache write and one-token attention in
        ``w8a8.generation.kernels``'s kernels (default: on a CUDA device; on the CPU only in
        Triton's interpreter). Off: transformers' own code and SDPA.
    """

    def __init__(self, model: nn.Module, cuda_graph: bool | None = None, prefill_graphs: bool = False,
                 kernels: bool | None = None) -> None:
        _check_model(model)
        device = next(model.parameters()).device
        if cuda_graph and device.type != "cuda":
            raise ValueError(f"w8a8.Generator: cuda_graph=True needs the model on a CUDA device, it is on {device}")
        if kernels and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(f"w8a8.Generator: kernels=True needs the model on a CUDA device (or Triton's "
                             f"interpreter, TRITON_INTERPRET=1), it is on {device}")
        self.kernels = device.type == "cuda" if kernels is None else kernels
        self.model = model
        self.device = device
        self.cuda_graph = device.type == "cuda" if cuda_graph is None else cuda_graph
        if prefill_graphs and not self.cuda_graph:
            raise ValueError("w8a8.Generator: prefill_graphs=True needs cuda_graph (a model on a CUDA device)")
        self.prefill_graphs = prefill_graphs
        self._slots: dict[tuple[int, int, bool], _Slot] = {}
        self._pool = None  # one CUDA graph memory pool for every slot's graph
        self._rng = None  # the generator the sampling graphs draw from (_sampling_graph)
        # the modeling modules whose attention calls a module-level apply_rotary_pos_emb
        self._rope_modules = sorted({sys.modules[type(m).__module__] for m in model.modules()
                                     if hasattr(m, "layer_idx") and callable(getattr(
                                         sys.modules[type(m).__module__], "apply_rotary_pos_emb", None))},
                                    key=lambda mod: mod.__name__)
        _register_attention()

    @contextlib.contextmanager
    def _steps(self, slot: _Slot):
        """Inside the block the model runs the slot's steps: its config names ATTENTION instead
        of "sdpa" and, with the kernels, its modeling modules' apply_rotary_pos_emb is a
        _FusedRope (both restored after)."""
        config = self.model.config
        before = config._attn_implementation
        ropes = {mod: mod.apply_rotary_pos_emb for mod in self._rope_modules} if slot.kernels else {}
        if before == "sdpa":
            config._attn_implementation = ATTENTION
        for mod, original in ropes.items():
            if not isinstance(original, _FusedRope):
                mod.apply_rotary_pos_emb = _FusedRope(original)
        steps.ACTIVE = slot
        try:
            yield
        finally:
            steps.ACTIVE = None
            config._attn_implementation = before
            for mod, original in ropes.items():
                mod.apply_rotary_pos_emb = original

    # --- slots ---------------------------------------------------------------------------------

    def _greedy(self, slot: _Slot, **inputs) -> torch.Tensor:
        """The model's forward on ``inputs`` into the slot's cache: its last logits [B, V]; the
        greedy token goes into ``slot.ids``."""
        with self._steps(slot):
            out = self.model(**inputs, **{_cache_keyword(self.model): slot.cache}, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1]
        slot.ids.copy_(logits.argmax(-1, keepdim=True))
        return logits

    def _step(self, slot: _Slot) -> torch.Tensor:
        """One decode step on the slot's buffers: logits [B, V] of the token in ``slot.ids``; the
        greedy token goes back into ``slot.ids`` and the position advances."""
        if slot.pads is None:
            logits = self._greedy(slot, input_ids=slot.ids, position_ids=slot.position)
        else:
            logits = self._greedy(slot, input_ids=slot.ids,
                                  **left_padding.step_inputs(slot.pads, slot.position, slot.key_index, slot.mask))
        slot.position.add_(1)
        return logits

    def _mask_dtype(self) -> torch.dtype | None:
        """The attention masks' dtype (left_padding.py): None (bool) for SDPA, the model's float dtype
        for transformers' "eager" attention, which adds its mask to the scores."""
        if self.model.config._attn_implementation != "eager":
            return None
        return self.model.get_input_embeddings().weight.dtype

    def slot(self, batch: int, cache_len: int, padded: bool = False) -> _Slot:
        """The slot for ``batch`` rows and a cache of at least ``cache_len`` positions (captured on
        first use); ``padded``: for left-padded batches, with its own step and graph."""
        cache_len = -(-cache_len // CACHE_ROUND) * CACHE_ROUND
        key = (batch, cache_len, padded)
        if key in self._slots:
            return self._slots[key]
        from transformers import StaticCache

        slot = _Slot(cache=StaticCache(config=self.model.config, max_cache_len=cache_len),
                     ids=torch.zeros(batch, 1, dtype=torch.long, device=self.device),
                     position=torch.zeros(1, 1, dtype=torch.long, device=self.device), kernels=self.kernels)
        if padded:
            dtype = self._mask_dtype()
            slot.pads = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
            slot.key_index = torch.arange(cache_len, device=self.device).unsqueeze(0)
            slot.mask = torch.zeros(batch, 1, 1, cache_len, dtype=dtype or torch.bool, device=self.device)
        if self.kernels:
            for layer in slot.cache.layers:
                if type(layer).__name__ == "StaticLayer":  # not the sliding-window kinds: they write elsewhere
                    layer.update = _fused_update(layer)
        if self.cuda_graph:
            with torch.inference_mode():
                self._capture(slot)
        self._slots[key] = slot
        return slot

    def _graphed(self, slot: _Slot, step) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """``step()`` warmed up and captured (``_warmed_capture``), the slot's cache reset before
        each warm-up run and after the capture. Returns the graph and the captured step's output."""
        graph, out = self._warmed_capture(step, before=slot.cache.reset)
        slot.cache.reset()
        return graph, out

    def _warmed_capture(self, step, before=None, rng: torch.Generator | None = None):
        """``step()`` warmed up twice on a side stream (lazy allocations, kernel selection, Triton
        compiles; ``before()`` ahead of each run), then captured into the Generator's memory pool,
        with ``rng`` (a generator the step draws from) registered with the graph. Returns the
        graph and the captured step's output."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                if before is not None:
                    before()
                step()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if rng is not None:
            graph.register_generator_state(rng)
        with torch.cuda.graph(graph, pool=self._pool):
            out = step()
        self._pool = graph.pool()
        return graph, out

    def _sampling_graph(self, slot: _Slot, sampler: Sampler) -> torch.cuda.CUDAGraph | None:
        """The slot's graph of ``sampler``'s pick from the decode graph's logits into ``slot.ids``
        (captured on first use; it writes ``slot.ids``: call it before the prompt runs), drawing
        from the Generator's own generator (``_drawing`` lends it the call's state); None where
        the pick is not captured (no decode graph, greedy, a penalty)."""
        key = sampler.graph_key
        if slot.graph is None or key is None:
            return None
        if key not in slot.samplers:
            if self._rng is None:
                self._rng = torch.Generator(self.device)
            rng = self._rng
            # (the decode graph's logits hold nothing before its first replay: the warm-up draws from zeros)
            slot.samplers[key], _ = self._warmed_capture(
                lambda: slot.ids.copy_(sampler.next_tokens(slot.logits, generator=rng)), before=slot.logits.zero_,
                rng=rng)
        return slot.samplers[key]

    @contextlib.contextmanager
    def _drawing(self, sampler: Sampler):
        """Inside the block the sampling graphs draw as the call's generator would (the device's
        default one for None): its state lent to the Generator's own generator, which the graphs
        are registered with, and handed back after with the draws made."""
        source = sampler.generator
        if source is None:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            source = torch.cuda.default_generators[index]
        self._rng.set_state(source.get_state())
        try:
            yield
        finally:
            source.set_state(self._rng.get_state())

    def _capture(self, slot: _Slot) -> None:
        slot.graph, slot.logits = self._graphed(slot, lambda: self._step(slot))

    def release(self) -> None:
        """Drop every slot (graphs, caches and their memory)."""
        self._slots.clear()
        self._pool = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # --- generation ----------------------------------------------------------------------------

    def _prefill_step(self, slot: _Slot, input_ids: torch.Tensor, pads: torch.Tensor | None = None) -> torch.Tensor:
        """The prompt's forward into the (reset) cache: its last logits [B, V]; the greedy token
        and its position go into the slot's buffers. ``pads``: a left-padded batch's [B, 1] (a
        prompt's graph reads the slot's own ``pads`` buffer)."""
        if pads is None:
            logits = self._greedy(slot, input_ids=input_ids)
        else:
            if pads is not slot.pads:
                slot.pads.copy_(pads)
            inputs = left_padding.prompt_inputs(pads, input_ids.shape[1], slot.key_index.shape[1], self._mask_dtype())
            logits = self._greedy(slot, input_ids=input_ids, **inputs)
        slot.position.fill_(input_ids.shape[1])
        return logits

    def prefill(self, slot: _Slot, input_ids: torch.Tensor, pads: torch.Tensor | None = None) -> torch.Tensor:
        """Reset the slot and run the prompt [B, P] (eagerly, or its graph with prefill_graphs; a
        left-padded batch with its ``pads`` [B, 1], in a padded slot); returns its last logits
        [B, V] (with prefill_graphs: the graph's buffer)."""
        if not self.prefill_graphs or input_ids.numel() > PREFILL_GRAPH_MAX_TOKENS:
            slot.cache.reset()
            return self._prefill_step(slot, input_ids, pads)
        prompt = input_ids.shape[1]
        if prompt not in slot.prefills:
            ids = torch.zeros_like(input_ids)
            slot.prefills[prompt] = (*self._graphed(slot, lambda: self._prefill_step(slot, ids, slot.pads)), ids)
        graph, logits, ids = slot.prefills[prompt]
        slot.cache.reset()
        ids.copy_(input_ids)
        if pads is not None:
            slot.pads.copy_(pads)
        graph.replay()
        return logits

    def decode(self, slot: _Slot) -> torch.Tensor:
        """One step: replay the graph (or run the step eagerly); returns the step's logits [B, V]
        (the graph's buffer: read it before the next step)."""
        if slot.graph is None:
            return self._step(slot)
        slot.graph.replay()
        return slot.logits

    def _check_request(self, input_ids: torch.Tensor, max_new_tokens) -> None:
        """Refuse bad ``input_ids`` / ``max_new_tokens`` (generate's docstring), before any work."""
        _check_model(self.model)
        if not torch.is_tensor(input_ids) or input_ids.dim() != 2 or input_ids.dtype != torch.long \
                or input_ids.device != self.device:
            got = (f"{input_ids.dtype} {list(input_ids.shape)} on {input_ids.device}" if torch.is_tensor(input_ids)
                   else type(input_ids).__name__)
            raise ValueError(f"w8a8.Generator.generate: input_ids must be int64 [batch, prompt] on {self.device}, "
                             f"got {got}")
        batch, prompt = input_ids.shape
        if batch == 0 or prompt == 0:
            raise ValueError(f"w8a8.Generator.generate: input_ids must hold at least one row and one token per row, "
                             f"got shape {list(input_ids.shape)}")
        if not _is_int(max_new_tokens):
            raise ValueError(f"w8a8.Generator.generate: max_new_tokens must be an int, got "
                             f"{type(max_new_tokens).__name__} {max_new_tokens!r}")
        if max_new_tokens < 1:
            raise ValueError(f"w8a8.Generator.generate: max_new_tokens must be >= 1, got {max_new_tokens}")
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and prompt + max_new_tokens > limit:
            raise ValueError(f"w8a8.Generator.generate: input_ids ({prompt} tokens) and max_new_tokens "
                             f"({max_new_tokens}) must fit the model's max_position_embeddings ({limit}) together, "
                             f"got {prompt} + {max_new_tokens} = {prompt + max_new_tokens} positions")
        embeddings = getattr(self.model.get_input_embeddings(), "num_embeddings", None)
        if isinstance(embeddings, int):  # two numbers read on the host: on a GPU, one synchronisation
            low, high = torch.stack(torch.aminmax(input_ids)).tolist()
            if low < 0 or high >= embeddings:
                raise ValueError(f"w8a8.Generator.generate: input_ids must be token ids in [0, {embeddings}) (the "
                                 f"model's embedding rows), got ids from {low} to {high}")

    @torch.inference_mode()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int | None = None,
                 eos_token_id: int | list[int] | None = None,
                 pad_token_id: int | None = None, output_logits: bool = False, *, stop_strings=None,
                 tokenizer=None, max_time: float | None = None, streamer=None, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None, repetition_penalty: float = 1.0,
                 attention_mask: torch.Tensor | None = None, generation_config=None):
        """Greedy (or, with ``do_sample``, sampled) continuation of ``input_ids`` [B, P] (int64, on
        the model's device).

        Returns [B, P + n] token ids, n = ``max_new_tokens`` unless the call ended early (every
        row ended: n runs to the last row's end; ``max_time``: the tokens made by then); with
        ``output_logits`` also the logits of each new token [B, n, V]. The greedy tokens are the
        same with and without the stop options below; those only decide where rows end and what
        the host reads (``w8a8/generation/stops.py`` states each rule exactly).

        eos_token_id : an id or a list, tuple or set of ids: a row ends at its first new token
            that is one of them.
        pad_token_id : what a row holds after its end (default: the first eos id; with
            neither, a row's tokens after its end stay as generated, as in transformers).
        stop_strings, tokenizer : a string or a list of strings and the tokenizer whose
            ``decode`` gives the text: a row ends at the first new token after which the
            decoded text of its new tokens contains one of them.
        max_time : seconds; the call ends at the first read of the tokens after this much time
            since it began (reads: every STOP_CHECK tokens, with a streamer every token).
        streamer : an object with ``put(token_ids)`` and ``end()`` (transformers'
            ``TextStreamer``, ``TextIteratorStreamer``): the prompt, each new token [B], then ``end()``.
        do_sample : draw each new token from the softmax of the processed logits instead of
            taking the argmax, as transformers' ``do_sample=True`` (``w8a8/generation/sampling.py``).
        temperature : with do_sample, the logits are divided by it first (default 1.0).
        top_k : with do_sample, only the k largest logits (and ties with the k-th) are kept.
        top_p : with do_sample, only the smallest set of tokens whose probability reaches top_p
            (at least one) is kept; applied after temperature and top_k, as transformers does.
        generator : with do_sample, the ``torch.Generator`` (on the model's device) the draws
            use; the same seed gives the same tokens. None: torch's default generator.
            ``output_logits`` gives the model's logits, before temperature and filtering.
        repetition_penalty : greedy or sampled, the logit of every token already in the row
            (prompt and new tokens, not its left padding) is divided by it where positive and
            multiplied by it where negative before the token is picked, as transformers'
            ``repetition_penalty`` (1.0, the default: none; above 1: repeats less likely).
        attention_mask : [B, P], 1 for a prompt token and 0 for padding, the padding on the left
            (``padding_side="left"``): rows of different lengths, each continued as it would be
            alone (``w8a8/generation/left_padding.py``); the returned rows keep their padding in front.
            None, or no 0 in it: every row is a whole prompt.
        generation_config : a transformers ``GenerationConfig`` (``model.generation_config``): its
            fields fill the arguments above that the call leaves at their defaults
            (``w8a8/generation/config.py``); beam search, the other penalties and other filters are refused.

        Raises ``ValueError``, naming the argument, before any work: input_ids not int64
        [B >= 1, P >= 1] on the model's device or not token ids, max_new_tokens not an int >= 1,
        P + max_new_tokens past the model's ``max_position_embeddings``, eos ids outside the
        vocabulary, stop_strings without a tokenizer, a streamer without put / end,
        repetition_penalty not a finite number > 0, with
        do_sample temperature not a finite number > 0, top_k not an int >= 1, top_p not in
        (0, 1] or a generator not on the model's device, without do_sample any of these four
        given, attention_mask not 0 / 1 left padding of input_ids' shape, a generation_config
        field generate does not do, a padded batch longer
        than the model's sliding window, a model the Generator does not run (its constructor's rules).
        """
        if generation_config is not None:
            given = {"max_new_tokens": max_new_tokens, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id,
                     "stop_strings": stop_strings, "max_time": max_time, "do_sample": do_sample,
                     "temperature": temperature, "top_k": top_k, "top_p": top_p,
                     "repetition_penalty": repetition_penalty}
            defaults = {name: p.default for name, p in inspect.signature(Generator.generate).parameters.items()}
            prompt = input_ids.shape[-1] if torch.is_tensor(input_ids) else 0
            args = gen_config.arguments(generation_config, given, defaults, prompt)
            max_new_tokens, eos_token_id, pad_token_id = args["max_new_tokens"], args["eos_token_id"], args["pad_token_id"]
            stop_strings, max_time, do_sample = args["stop_strings"], args["max_time"], args["do_sample"]
            temperature, top_k, top_p = args["temperature"], args["top_k"], args["top_p"]
            repetition_penalty = args["repetition_penalty"]
        self._check_request(input_ids, max_new_tokens)
        pads = left_padding.check(attention_mask, input_ids)
        window = getattr(self.model.config, "sliding_window", None)
        if pads is not None and isinstance(window, int) and input_ids.shape[1] + max_new_tokens > window:
            raise _error("a left-padded batch (attention_mask)", f"fit the model's sliding_window ({window}) with "
                         f"max_new_tokens", f"{input_ids.shape[1]} + {max_new_tokens} positions (the padded "
                         "batch's mask has no window)")
        sampler = Sampler(self.device, do_sample, temperature, top_k, top_p, generator, repetition_penalty)
        batch, prompt = input_ids.shape
        max_new_tokens = int(max_new_tokens)
        stops = Stops(batch, _vocab_size(self.model), STOP_CHECK, eos_token_id, pad_token_id, stop_strings, tokenizer,
                      max_time, streamer)
        if streamer is not None:
            streamer.put(input_ids.cpu())
        try:
            slot = self.slot(batch, prompt + max_new_tokens, padded=pads is not None)
            sampling = self._sampling_graph(slot, sampler)
            # The row's tokens so far, prompt then new ones: what the repetition penalty reads each step.
            seen = torch.empty(batch, prompt + max_new_tokens, dtype=torch.long, device=self.device)
            seen[:, :prompt] = input_ids
            new = seen[:, prompt:]
            first = self.prefill(slot, input_ids, pads)
            if sampler.active:
                slot.ids.copy_(sampler.next_tokens(first, input_ids, pads))
            logits = [first.clone()] if output_logits else None
            new[:, 0] = slot.ids[:, 0]
            done = 1
            with self._drawing(sampler) if sampling is not None else contextlib.nullcontext():
                for i in range(1, max_new_tokens):
                    if stops.every and i % stops.every == 0 and stops.check(new[:, stops.checked:i].cpu()):
                        break
                    step_logits = self.decode(slot)
                    if sampling is not None:
                        sampling.replay()
                    elif sampler.active:
                        slot.ids.copy_(sampler.next_tokens(step_logits, seen[:, :prompt + i], pads))
                    if output_logits:
                        logits.append(step_logits.clone())
                    new[:, i] = slot.ids[:, 0]
                    done = i + 1
            if stops.every and stops.checked < done:  # the tokens since the last read
                stops.check(new[:, stops.checked:done].cpu())
            length = stops.length(done)
            new = stops.filled(new[:, :length])
        finally:
            if streamer is not None:
                streamer.end()
        tokens = torch.cat([input_ids, new], dim=1)
        return (tokens, torch.stack(logits[:length], dim=1)) if output_logits else tokens
