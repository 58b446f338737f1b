"""w8a8.Generator.generate's stop rules, streaming and refusals (w8a8/generation/stops.py).

CPU, a tiny random transformers Llama and a tiny byte-level BPE tokenizer built here (no
download). Each rule transformers' generate also has (several eos ids, stop strings, streamers)
against transformers' own greedy generate with the same rule, token for token; max_time against
a fake clock; the stop-string rule itself on tokens written by hand; every refusal's words, and
that it comes before any work.
"""
import copy
import threading

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from w8a8.generation import Generator  # noqa: E402
from w8a8.generation import generator as generation  # noqa: E402
from w8a8.generation import stops as stops_module  # noqa: E402
from w8a8.generation.stops import Stops  # noqa: E402
from generator_helpers import Recorder, _one_thread, tiny_llama  # noqa: E402,F401  (_one_thread: autouse)

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house", "big", "small", "red", "blue",
         "is", "was", "and", "it", "of", "in", "quantized", "model", "int8", "weights", "fast", "slow"]
PROMPTS = ["the cat sat on the mat", "a big red dog ran to", "int8 weights are fast and"]
PAD = 0  # "<s>": never generated (below)
NEW = 24


@pytest.fixture(scope="module")
def tok():
    """A byte-level BPE (GPT-2's kind, 320 tokens) trained on WORDS, as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([" ".join(WORDS[i:] + WORDS[:i]) + ".\n" for i in range(len(WORDS))], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def models(tok):
    """The tiny Llama over tok's vocabulary, float32 and W8A8, the head's rows of special tokens and
    of tokens that are not printable ASCII zeroed, so that the text is ASCII and "</s>" never comes
    unless asked."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte = {c: b for b, c in bytes_to_unicode().items()}
    printable = {c for c, b in byte.items() if 32 <= b < 127 or b == 10}  # printable ASCII and newline
    ascii_ids = [i for i, t in enumerate(tok.convert_ids_to_tokens(list(range(len(tok)))))
                 if i not in tok.all_special_ids and set(t) <= printable]
    keep = torch.zeros(len(tok), dtype=torch.bool)
    keep[ascii_ids] = True
    return tiny_llama(len(tok), PAD, head_rows=keep)


def _prompt(tok, batch=3, length=5):
    return torch.tensor([tok(text).input_ids[:length] for text in PROMPTS[:batch]])


def _hf(model, ids, new=NEW, **kwargs):
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False, **kwargs)


def _same_puts(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and x.device == y.device and torch.equal(x, y)
                                    for x, y in zip(a, b))


# --- eos ids ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_several_eos_ids_equal_transformers(tok, models, impl, monkeypatch):
    """eos_token_id as a list, tuple or set: transformers' tokens (rows end at their first eos id,
    pad afterwards, the result ends at the last row's end), whatever the read interval."""
    model = models[impl]
    ids = _prompt(tok)
    free = Generator(model).generate(ids, NEW)[:, 5:]
    eos = [int(free[0, 3]), int(free[1, 6])]  # row 0 meets one at its 4th new token
    expected = _hf(model, ids, eos_token_id=eos, pad_token_id=PAD)
    assert expected.shape[1] < 5 + NEW or (expected[:, 5:] == PAD).any()  # the rule did something
    for check in (16, 4, 1):
        monkeypatch.setattr(generation, "STOP_CHECK", check)
        gen = Generator(model)
        for form in (eos, tuple(eos), set(eos)):
            if isinstance(form, set) and sorted(eos) != eos:
                continue  # a set's first id (the default pad) is its smallest
            assert torch.equal(gen.generate(ids, NEW, eos_token_id=form, pad_token_id=PAD), expected), (check, form)
    # pad_token_id defaults to the first eos id, as transformers' does where its generation_config has none
    monkeypatch.setattr(model.generation_config, "pad_token_id", None)
    assert torch.equal(Generator(model).generate(ids, NEW, eos_token_id=eos), _hf(model, ids, eos_token_id=eos))


def test_eos_ends_rows_and_output_logits_follow(tok, models):
    """Rows ending at different tokens: each row its free tokens up to its eos, then pad; the
    logits are those of the tokens returned (the trimmed length), each row's argmax its token."""
    model = models["float"]
    ids = _prompt(tok)
    free, free_logits = Generator(model).generate(ids, NEW, output_logits=True)
    free = free[:, 5:]
    eos = int(free[2, 2])
    tokens, logits = Generator(model).generate(ids, NEW, eos_token_id=eos, pad_token_id=-1, output_logits=True)
    new = tokens[:, 5:]
    assert logits.shape[:2] == new.shape and torch.equal(logits, free_logits[:, :new.shape[1]])
    for row in range(3):
        hits = (free[row] == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else NEW
        assert torch.equal(new[row, :end], free[row, :end]) and (new[row, end:] == -1).all()
    ends = [int((free[r] == eos).nonzero()[0]) if bool((free[r] == eos).any()) else None for r in range(3)]
    assert new.shape[1] == (max(ends) + 1 if None not in ends else NEW)


# --- stop strings -----------------------------------------------------------------------------------


def _our_stop(tok, new, strings):
    """The documented rule: the first t with a string in tok.decode(new[:t + 1]), else None."""
    return next((t for t in range(len(new)) if any(s in tok.decode(new[:t + 1]) for s in strings)), None)


def _their_stop(tok, prompt, new, strings):
    """transformers' StopStringCriteria on the prompt and the first t + 1 new tokens."""
    from transformers.generation.stopping_criteria import StopStringCriteria

    criteria = StopStringCriteria(tok, list(strings))
    seq = prompt.tolist() + new
    return next((t for t in range(len(new)) if bool(criteria(torch.tensor([seq[:len(prompt) + t + 1]]), None)[0])),
                None)


def _pick_stop_strings(tok, ids, free):
    """One stop string per row, 3 characters of its free text, where the two rules agree (for
    example not a string that begins in the prompt's text, which transformers searches too) and
    row r ends at its new token 2 + 5 r or later (rows apart), before its third-to-last."""
    strings = []
    for row in range(len(free)):
        text = tok.decode(free[row])
        for start in range(len(text) - 2):
            candidate = text[start:start + 3]
            if not candidate.isprintable() or candidate.isspace():
                continue
            trial = strings + [candidate]
            ours = [_our_stop(tok, free[r].tolist(), trial) for r in range(len(free))]
            if ours[row] is not None and 2 + 5 * row <= ours[row] <= free.shape[1] - 3 and ours == [
                    _their_stop(tok, ids[r], free[r].tolist(), trial) for r in range(len(free))]:
                strings = trial
                break
    return strings


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_stop_strings_equal_transformers(tok, models, impl, monkeypatch):
    model = models[impl]
    ids = _prompt(tok)
    free = Generator(model).generate(ids, NEW)[:, 5:]
    strings = _pick_stop_strings(tok, ids, free)
    assert strings, "no stop string found on which the rules agree"
    kwargs = dict(stop_strings=strings, tokenizer=tok, eos_token_id=tok.eos_token_id, pad_token_id=PAD)
    expected = _hf(model, ids, **kwargs)
    ends = [_our_stop(tok, free[r].tolist(), strings) for r in range(3)]
    for row, end in enumerate(ends):  # each row: its free tokens to its end, then pad
        stop = NEW if end is None else end + 1
        assert torch.equal(expected[row, 5:5 + stop], free[row, :stop]) and (expected[row, 5 + stop:] == PAD).all()
    for check in (16, 4):
        monkeypatch.setattr(generation, "STOP_CHECK", check)
        assert torch.equal(Generator(model).generate(ids, NEW, **kwargs), expected), check


def test_stop_string_rule_on_written_tokens(tok):
    """The rule on tokens written by hand: a string across tokens, a token running past the
    string (kept), rows ending apart, tokens after a row's end ignored, eos first."""
    def ends(rows, strings=(), eos=None):
        stops = Stops(len(rows), len(tok), 16, eos_token_id=eos, stop_strings=list(strings), tokenizer=tok)
        width = max(map(len, rows))
        stops.check(torch.tensor([r + [PAD] * (width - len(r)) for r in rows]))
        return stops.ends

    cat, sat, mat = (tok(w).input_ids for w in ("the cat", " sat on", " the mat"))
    assert [tok.decode([i]) for i in cat + sat + mat] == ["t", "he", " cat", " sat", " o", "n", " t", "he", " mat"]
    text = cat + sat + mat
    assert ends([text], ["t sa"]) == [3]  # "t" of " cat", " sa" of " sat": the token that completes it
    assert ends([text], ["he c"]) == [2]  # " cat" completes it and runs past it ("at"): kept
    assert ends([text], ["mat"]) == [8]
    assert ends([text], ["dog"]) == [None]
    assert ends([text], ["the"]) == [1]  # "t" + "he": the first occurrence; the later one changes nothing
    assert ends([cat + sat, mat + cat], ["cat", "mat"]) == [2, 2]
    assert ends([cat + sat, sat + cat], ["on"]) == [5, 2]  # rows apart
    assert ends([text], ["sat"], eos=cat[1]) == [1]  # an eos id before the string


# --- streamers --------------------------------------------------------------------------------------


def test_streamer_gets_what_transformers_gives(tok, models):
    """The prompt [B, P], then each new token [B] (ended rows: pad), then end(), tensor for tensor
    as transformers' generate gives them; rows ending apart (several eos ids)."""
    model = models["float"]
    ids = _prompt(tok)
    free = Generator(model).generate(ids, NEW)[:, 5:]
    eos = [int(free[0, 3]), int(free[1, 6])]
    theirs, ours = Recorder(), Recorder()
    expected = _hf(model, ids, eos_token_id=eos, pad_token_id=PAD, streamer=theirs)
    tokens = Generator(model).generate(ids, NEW, eos_token_id=eos, pad_token_id=PAD, streamer=ours)
    assert torch.equal(tokens, expected)
    assert ours.ends == theirs.ends == 1
    assert torch.equal(ours.puts[0], ids) and all(p.shape == (3,) and p.dtype == torch.long for p in ours.puts[1:])
    assert _same_puts(ours.puts, theirs.puts)
    assert torch.equal(torch.stack(ours.puts[1:], dim=1), tokens[:, 5:])


def test_text_streamer_prints_what_transformers_prints(tok, models, capsys):
    from transformers import TextStreamer

    model = models["w8a8"]
    ids = _prompt(tok, batch=1)
    free = Generator(model).generate(ids, NEW)[:, 5:]
    strings = _pick_stop_strings(tok, ids, free)
    kwargs = dict(stop_strings=strings, tokenizer=tok, eos_token_id=tok.eos_token_id)
    capsys.readouterr()
    expected = _hf(model, ids, streamer=TextStreamer(tok), **kwargs)
    printed = capsys.readouterr().out
    tokens = Generator(model).generate(ids, NEW, streamer=TextStreamer(tok), **kwargs)
    assert torch.equal(tokens, expected) and tokens.shape[1] < 5 + NEW
    assert capsys.readouterr().out == printed == tok.decode(tokens[0]) + "\n"


def test_text_iterator_streamer_from_a_thread(tok, models):
    """The usual serving pattern: generate in a thread, the text read as it comes."""
    from transformers import TextIteratorStreamer

    model = models["float"]
    ids = _prompt(tok, batch=1)

    def collect(generate):
        streamer = TextIteratorStreamer(tok, skip_prompt=True, timeout=60)
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("tokens", generate(streamer)))
        thread.start()
        text = "".join(streamer)
        thread.join()
        return text, result["tokens"]

    text, tokens = collect(lambda s: Generator(model).generate(ids, 12, streamer=s))
    expected_text, expected = collect(lambda s: _hf(model, ids, 12, streamer=s))
    assert torch.equal(tokens, expected) and text == expected_text == tok.decode(tokens[0, 5:])


def test_streamer_ends_when_generate_raises(tok, models, monkeypatch):
    """end() comes even when the call fails after the prompt was streamed, so that a reader of a
    TextIteratorStreamer is not left waiting."""
    gen = Generator(models["float"])
    monkeypatch.setattr(gen, "prefill", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    streamer = Recorder()
    with pytest.raises(RuntimeError, match="boom"):
        gen.generate(_prompt(tok), 4, streamer=streamer)
    assert len(streamer.puts) == 1 and streamer.ends == 1


# --- max_time ---------------------------------------------------------------------------------------


def test_max_time_ends_the_call_at_a_read(tok, models, monkeypatch):
    """A clock that moves 1 s per reading: with max_time=2.5 the call ends at the third read of
    the tokens after it began (every STOP_CHECK tokens; with a streamer every token), the tokens
    made by then being the free run's."""
    model = models["float"]
    ids = _prompt(tok)
    free = Generator(model).generate(ids, NEW)
    monkeypatch.setattr(generation, "STOP_CHECK", 4)

    def run(**kwargs):
        ticks = iter(range(1000))
        monkeypatch.setattr(stops_module, "_clock", lambda: float(next(ticks)))
        return Generator(model).generate(ids, NEW, max_time=2.5, **kwargs)

    assert torch.equal(run(), free[:, :5 + 12])
    streamer = Recorder()
    assert torch.equal(run(streamer=streamer), free[:, :5 + 3]) and len(streamer.puts) == 4
    monkeypatch.setattr(stops_module, "_clock", lambda: 0.0)
    assert torch.equal(Generator(model).generate(ids, NEW, max_time=0), free)  # 0 s: never more than 0 s later


# --- attention implementations ----------------------------------------------------------------------


def test_eager_attention_equals_transformers(tok, models):
    model = copy.deepcopy(models["float"])
    model.config._attn_implementation = "eager"
    ids = _prompt(tok)
    assert torch.equal(Generator(model).generate(ids, 12), _hf(model, ids, 12))
    assert model.config._attn_implementation == "eager"


# --- refusals ---------------------------------------------------------------------------------------


def test_unsupported_models_are_refused(models):
    from transformers import LlamaModel, T5Config, T5ForConditionalGeneration

    with pytest.raises(ValueError, match=r"w8a8.Generator: model must be a transformers causal LM \(LlamaForCausalLM "
                                         r"and the like\), got Linear, which has no config or get_output_embeddings"):
        Generator(torch.nn.Linear(4, 4))
    base = LlamaModel(models["float"].config)
    with pytest.raises(ValueError, match=r"w8a8.Generator: model must be a causal LM with an output head \(a "
                                         r"...ForCausalLM\), got LlamaModel, whose get_output_embeddings\(\) is None"):
        Generator(base)
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2))
    with pytest.raises(ValueError, match=r"w8a8.Generator: model must be a decoder-only causal LM, got "
                                         r"T5ForConditionalGeneration \(config.is_encoder_decoder=True\)"):
        Generator(t5)
    model = copy.deepcopy(models["float"])
    gen = Generator(model)
    for attention in ("flash_attention_2", "flex_attention", "paged|sdpa"):
        model.config._attn_implementation = attention
        message = (r"w8a8.Generator: model.config._attn_implementation must be one of 'sdpa', 'eager', got "
                   + repr(attention).replace("|", r"\|") + r" \(load the model with attn_implementation=\"sdpa\"")
        with pytest.raises(ValueError, match=message):
            Generator(model)
        with pytest.raises(ValueError, match=message):  # changed after the Generator was made: refused by generate
            gen.generate(torch.zeros(1, 3, dtype=torch.long), 2)
    assert not gen._slots


def _bad_calls(tok, vocab):
    """(keyword arguments of generate, the message they must raise), each with one thing wrong."""
    ids = torch.zeros(2, 3, dtype=torch.long)
    g = r"w8a8.Generator.generate: "
    return [
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)),
         g + r"input_ids must hold at least one row and one token per row, got shape \[1, 0\]"),
        (dict(input_ids=torch.zeros(0, 3, dtype=torch.long)),
         g + r"input_ids must hold at least one row and one token per row, got shape \[0, 3\]"),
        (dict(input_ids=ids.int()), g + r"input_ids must be int64 \[batch, prompt\] on cpu, got torch.int32 \[2, 3\]"),
        (dict(input_ids=[[1, 2]]), g + r"input_ids must be int64 \[batch, prompt\] on cpu, got list"),
        (dict(input_ids=ids + vocab), g + rf"input_ids must be token ids in \[0, {vocab}\) \(the model's embedding "
                                          rf"rows\), got ids from {vocab} to {vocab}"),
        (dict(input_ids=ids - 1), g + rf"input_ids must be token ids in \[0, {vocab}\).*got ids from -1 to -1"),
        (dict(input_ids=torch.zeros(1, 2000, dtype=torch.long), max_new_tokens=49),
         g + r"input_ids \(2000 tokens\) and max_new_tokens \(49\) must fit the model's max_position_embeddings "
             r"\(2048\) together, got 2000 \+ 49 = 2049 positions"),
        (dict(max_new_tokens=0), g + r"max_new_tokens must be >= 1, got 0"),
        (dict(max_new_tokens=-3), g + r"max_new_tokens must be >= 1, got -3"),
        (dict(max_new_tokens=2.0), g + r"max_new_tokens must be an int, got float 2.0"),
        (dict(max_new_tokens=True), g + r"max_new_tokens must be an int, got bool True"),
        (dict(max_new_tokens="4"), g + r"max_new_tokens must be an int, got str '4'"),
        (dict(eos_token_id=vocab), g + rf"eos_token_id must be token ids in \[0, {vocab}\) \(the model's vocabulary\), "
                                       rf"got {vocab}"),
        (dict(eos_token_id=[3, -1]), g + rf"eos_token_id must be token ids in \[0, {vocab}\).*got \[3, -1\]"),
        (dict(eos_token_id=[]),
         g + r"eos_token_id must be an int or a non-empty list, tuple or set of ints, got list \[\]"),
        (dict(eos_token_id="</s>"), g + r"eos_token_id must be an int or a non-empty list.*got str '</s>'"),
        (dict(eos_token_id=[1.0]), g + r"eos_token_id must be an int or a non-empty list.*got list \[1.0\]"),
        (dict(pad_token_id=0.5), g + r"pad_token_id must be an int or None, got float 0.5"),
        (dict(stop_strings=["cat"]), g + r"stop_strings must come with tokenizer= \(its decode gives the text they are "
                                         r"searched in\), got stop_strings=\['cat'\] and tokenizer=None"),
        (dict(stop_strings=["cat", ""], tokenizer=tok),
         g + r"stop_strings must be a non-empty str or a list or tuple of non-empty strs, got \['cat', ''\]"),
        (dict(stop_strings=3, tokenizer=tok), g + r"stop_strings must be a non-empty str or a list.*got 3"),
        (dict(stop_strings="cat", tokenizer=object()),
         g + r"tokenizer must have a decode\(token_ids\) method \(a transformers tokenizer\), got object"),
        (dict(max_time=-1), g + r"max_time must be a number of seconds >= 0 or None, got -1"),
        (dict(max_time="1"), g + r"max_time must be a number of seconds >= 0 or None, got '1'"),
        (dict(max_time=float("nan")), g + r"max_time must be a number of seconds >= 0 or None, got nan"),
        (dict(streamer=object()), g + r"streamer must have put\(token_ids\) and end\(\) methods \(as transformers' "
                                      r"TextStreamer\), got object without put and end"),
        (dict(streamer=type("PutOnly", (), {"put": lambda self, v: None})()),
         g + r"streamer must have put\(token_ids\) and end\(\) methods.*got PutOnly without end"),
    ]


def test_bad_arguments_are_refused_before_any_work(tok, models):
    """Each refusal names the argument, the rule and what it got, before the model runs, a slot
    is made or the streamer hears anything."""
    model = models["float"]
    vocab = len(tok)
    gen = Generator(model)
    forwards = []
    handle = model.register_forward_pre_hook(lambda *a: forwards.append(1))
    try:
        for kwargs, message in _bad_calls(tok, vocab):
            call = dict(input_ids=torch.zeros(2, 3, dtype=torch.long), max_new_tokens=4)
            call.update(kwargs)
            if "streamer" not in kwargs:
                call["streamer"] = Recorder()
            with pytest.raises(ValueError, match=message):
                gen.generate(**call)
            assert not forwards and not gen._slots, kwargs
            assert "streamer" in kwargs or not (call["streamer"].puts or call["streamer"].ends), kwargs
    finally:
        handle.remove()
