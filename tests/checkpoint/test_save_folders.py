"""What save_quantized leaves on disk: the umask's permissions, no weight file of the source at any
depth, no output inside the source, the old or the new checkpoint at every kill point (a real
SIGKILL), stale temporaries cleaned; models it cannot save whole are refused, naming why."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import w8a8
from helpers import Tiny
from parallel.test_tensor_parallel import one_rank_group  # noqa: F401  (a gloo group of this process alone)
from w8a8.checkpoint import save as save_mod


def _model(seed):
    torch.manual_seed(seed)
    model = Tiny()
    w8a8.quantize_model(model, progress=False)
    return model


def _siblings(folder):
    parent, base = os.path.split(os.path.abspath(folder))
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{base}."))


def _modes(folder):
    out = {".": os.stat(folder).st_mode & 0o777}
    for dirpath, dirs, files in os.walk(folder):
        for n in dirs + files:
            path = os.path.join(dirpath, n)
            out[os.path.relpath(path, folder)] = os.stat(path).st_mode & 0o777
    return out


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_folder_and_files_get_the_umask_permissions(tmp_path, umask):
    old = os.umask(umask)
    try:
        out = str(tmp_path / "q")
        w8a8.save_quantized(_model(0), out, max_shard_bytes=1000, progress=False)
        modes = _modes(out)
        assert modes.pop(".") == 0o777 & ~umask
        assert modes and all(m == 0o666 & ~umask for m in modes.values()), modes
        os.chmod(out, 0o711)  # an existing folder keeps the mode its owner gave it
        w8a8.save_quantized(_model(1), out, progress=False)
        assert os.stat(out).st_mode & 0o777 == 0o711
    finally:
        os.umask(old)


def test_weight_files_of_the_source_are_left_at_every_depth(tmp_path):
    src = tmp_path / "src"
    for rel in ("original/consolidated.00.pth", "original/params.json", "sub/deeper/shard.safetensors",
                "sub/deeper/tokenizer.model", "model.safetensors", "tokenizer.json", ".cache/x.lock"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    out = tmp_path / "q"
    w8a8.save_quantized(_model(0), str(out), source=str(src), progress=False)
    files = sorted(os.path.relpath(os.path.join(d, n), out) for d, _, ns in os.walk(out) for n in ns)
    assert files == ["config.json", "model.safetensors", "original/params.json", "sub/deeper/tokenizer.model",
                     "tokenizer.json"]
    assert (out / "model.safetensors").read_bytes() != b"model.safetensors"  # ours, not the source's


def test_output_inside_the_source_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=rf"the output folder {src / 'int8'} is inside the source folder {src}"):
        w8a8.save_quantized(_model(0), str(src / "int8"), source=str(src), progress=False)
    assert sorted(os.listdir(src)) == ["tokenizer.json"]


# --- kill points ---------------------------------------------------------------------------------

_KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{tests!r}, os.path.dirname({tests!r})]  # this checkout's w8a8 and test helpers
    import safetensors.torch, torch, w8a8
    from w8a8.checkpoint import save as S
    from helpers import Tiny

    out, kill_at, exchange = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "exchange"
    calls = []

    def killing(fn):
        def wrapped(*args, **kwargs):
            calls.append(fn.__name__)
            if len(calls) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return wrapped

    if not exchange:  # a file system without RENAME_EXCHANGE
        S.exchange = lambda a, b: False
    S.exchange, S.os.rename, S.shutil.rmtree = killing(S.exchange), killing(os.rename), killing(S.shutil.rmtree)
    safetensors.torch.save_file = killing(safetensors.torch.save_file)
    torch.manual_seed(2)
    model = Tiny()
    w8a8.quantize_model(model, progress=False, fuse=False, report=False)
    w8a8.save_quantized(model, out, max_shard_bytes=2500, progress=False)
    print(" ".join(calls))
""")


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_every_kill_point_leaves_the_old_or_the_new_checkpoint(tmp_path, swap):
    old, new = _model(1), _model(2)
    x = torch.randn(3, 32)
    out = str(tmp_path / "q")
    script = tmp_path / "killer.py"
    script.write_text(_KILLER.format(tests=os.path.dirname(os.path.dirname(__file__))))
    seen = set()
    for k in range(1, 30):
        w8a8.save_quantized(old, out, max_shard_bytes=2500, progress=False)
        res = subprocess.run([sys.executable, str(script), out, str(k), swap.split()[0]], capture_output=True,
                             text=True, timeout=300)
        if res.returncode == 0:  # the save ran past every kill point
            assert k > 3 and _siblings(out) == [], (k, res.stdout)
            assert torch.equal(w8a8.load_quantized(Tiny(), out)(x), new(x))
            break
        assert res.returncode == -signal.SIGKILL, res.stderr
        if os.path.exists(out):
            got = w8a8.load_quantized(Tiny(), out)(x)
            seen.add("new" if torch.equal(got, new(x)) else "old")
            assert torch.equal(got, new(x)) or torch.equal(got, old(x)), k
        else:  # killed between the two renames: the previous checkpoint is there by name
            assert swap == "two renames"
            seen.add("renamed")
            left = save_mod.stale_siblings(out)["old"]
            with pytest.raises(w8a8.CheckpointError, match=rf"previous checkpoint at {left[0]}: rename it to {out}"):
                w8a8.load_quantized(Tiny(), out)
            assert torch.equal(w8a8.load_quantized(Tiny(), left[0])(x), old(x))
        assert _siblings(out), k  # the killed save's leftovers ...
    else:
        pytest.fail("the save never completed")
    assert seen == ({"old", "new", "renamed"} if swap == "two renames" else {"old", "new"}), seen
    w8a8.save_quantized(old, out, progress=False)
    assert _siblings(out) == []  # ... are removed by the next save


def test_a_renamed_checkpoint_is_put_back_before_the_next_save(tmp_path, monkeypatch):
    old = _model(1)
    out = str(tmp_path / "q")
    w8a8.save_quantized(old, out, progress=False)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    parent, base = os.path.split(out)
    os.rename(out, os.path.join(parent, f".{base}.w8a8-old-{save_mod._HOST}-{dead.pid}-0"))

    def fail(*args, **kwargs):
        raise OSError("disk full")

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        w8a8.save_quantized(_model(2), out, progress=False)
    x = torch.randn(2, 32)
    assert torch.equal(w8a8.load_quantized(Tiny(), out)(x), old(x)) and _siblings(out) == []


# --- models that cannot be saved whole ---------------------------------------------------------


def test_a_model_holding_a_transformers_model_is_refused_and_the_inner_one_saves(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64)

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = transformers.LlamaForCausalLM(cfg).eval()

    model = Wrapper()
    w8a8.quantize_model(model, progress=False)
    with pytest.raises(ValueError, match=r"Wrapper is not a transformers model but holds one at 'inner' "
                                         r"\(LlamaForCausalLM\).*model.get_submodule\('inner'\)"):
        w8a8.save_quantized(model, str(tmp_path / "q"), progress=False)
    assert not os.path.exists(tmp_path / "q")
    model.inner.save_pretrained(str(tmp_path / "q"))  # quantize_model installed it on the inner model
    ids = torch.arange(5).reshape(1, 5)
    with torch.no_grad():
        assert torch.equal(w8a8.from_pretrained(str(tmp_path / "q"), progress=False)(ids).logits,
                           model.inner(ids).logits)


def test_a_tensor_parallel_model_is_refused(tmp_path, one_rank_group):
    from w8a8.parallel import Rowwise, shard_model

    model = _model(0)
    shard_model(model, {"fc2": Rowwise()})
    with pytest.raises(ValueError, match=r"layer 'fc2' is a RowParallelW8A8Linear, one rank's slice .*"
                                         r"Save the unsharded model"):
        w8a8.save_quantized(model, str(tmp_path / "q"), progress=False)
    assert not os.path.exists(tmp_path / "q") and _siblings(tmp_path / "q") == []


def test_save_pretrained_max_shard_size_is_read_as_transformers_reads_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    w8a8.quantize_model(model, progress=False)
    out = tmp_path / "q"
    model.save_pretrained(str(out), max_shard_size="10KB")  # decimal units, as huggingface_hub parses them
    index = json.load(open(out / "model.safetensors.index.json"))
    assert len(set(index["weight_map"].values())) > 1
    assert all(os.path.getsize(out / f) <= 10_000 + 4096 for f in set(index["weight_map"].values()))
    with pytest.raises(ValueError, match=r"max_shard_bytes='5 parsecs': Unit .* not supported"):
        model.save_pretrained(str(tmp_path / "bad"), max_shard_size="5 parsecs")
    assert not os.path.exists(tmp_path / "bad") and _siblings(tmp_path / "bad") == []
