"""Write docs/API.md from the docstrings: every name of the ``__all__`` of ``w8a8`` and of the modules
a user reaches through it (``MODULES``).

    python docs/gen_api.py            # rewrite docs/API.md
    python docs/gen_api.py --check    # exit 1 if docs/API.md is out of date (tests/repository/test_examples.py)

Per name: its signature and the first paragraph of its docstring; for a class, its own
public methods the same way. The docstrings are the reference; this page is their index.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "API.md"
MODULES = ("w8a8", "w8a8.ops", "w8a8.calibrate", "w8a8.fusion", "w8a8.linear", "w8a8.quantize_model", "w8a8.dispatch",
           "w8a8.parallel")
WIDTH = 96


def first_paragraph(obj) -> str:
    """The docstring's first paragraph as one line; one ending in ``::`` keeps the literal block after it."""
    doc = inspect.getdoc(obj) or ""
    paras = doc.strip().split("\n\n")
    para = re.sub(r"``([^`]+)``", r"`\1`", paras[0])  # RST literals -> Markdown
    text = " ".join(line.strip() for line in para.splitlines())
    if text.endswith("::") and len(paras) > 1:
        return text[:-2].rstrip() + ":\n\n```text\n" + inspect.cleandoc(paras[1]) + "\n```"
    return text


_ADDRESS = re.compile(r"<([\w.]+(?: object)?) at 0x[0-9a-f]+>")


def _default(value) -> str:
    """A default's repr without a memory address (sentinels print as ``<object object>``)."""
    return _ADDRESS.sub(lambda m: "<" + m.group(1).replace("object object", "unset") + ">", repr(value))


def _param(p: inspect.Parameter) -> str:
    star = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
    text = star + p.name
    if p.annotation is not p.empty:
        text += f": {_annotation(p.annotation)}"
    if p.default is not p.empty:
        text += (" = " if p.annotation is not p.empty else "=") + _default(p.default)
    return text


def signature(name: str, obj) -> str:
    """``name(params)`` (``-> ret``), one parameter per line when it does not fit in WIDTH."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    params, kw_only_marked = [], False
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        if p.kind == p.KEYWORD_ONLY and not kw_only_marked and not any(q.startswith("*") for q in params):
            params.append("*")
        kw_only_marked |= p.kind == p.KEYWORD_ONLY
        params.append(_param(p))
    ret = "" if sig.return_annotation is inspect.Signature.empty else f" -> {_annotation(sig.return_annotation)}"
    if inspect.isclass(obj):
        ret = ""
    one = f"{name}({', '.join(params)}){ret}"
    if len(one) <= WIDTH:
        return one
    return f"{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){ret}"


def _annotation(a) -> str:
    return a if isinstance(a, str) else inspect.formatannotation(a)


def own_methods(cls) -> list[tuple[str, object]]:
    """Public methods and classmethods defined on ``cls`` itself (not inherited from nn.Module)."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") or name in ("forward", "extra_repr"):  # nn.Module's protocol
            continue
        if isinstance(member, (classmethod, staticmethod)):
            member = member.__func__
        if inspect.isfunction(member):
            out.append((name, member))
    return out


def entry(module: str, name: str, obj) -> list[str]:
    lines = [f"### `{module}.{name}`", ""]
    if inspect.isclass(obj) or callable(obj):
        kind = "class " if inspect.isclass(obj) else ""
        lines += ["```python", kind + signature(name, obj), "```", ""]
        lines += [first_paragraph(obj), ""]
        if inspect.isclass(obj):
            for mname, m in own_methods(obj):
                sig = signature(mname, m)
                lines.append((f"- `{sig}`" if "\n" not in sig else f"- `{mname}(...)`")
                             + (f": {first_paragraph(m)}" if first_paragraph(m) else ""))
            if own_methods(obj):
                lines.append("")
    else:
        lines += [f"`{type(obj).__name__}`: `{obj!r}`", ""]
    return lines


def render() -> str:
    import importlib

    lines = ["# API reference", "",
             "Generated from the docstrings by `python docs/gen_api.py` (a test checks it is current);",
             "the docstrings hold the full parameter lists, shapes and errors. How the pieces fit:",
             "[GUIDE.md](GUIDE.md).", ""]
    shown: dict[int, str] = {}  # an object the top level re-exports is described once, where it is first listed
    for modname in MODULES:
        module = importlib.import_module(modname)
        lines += [f"## `{modname}`", "", first_paragraph(module), ""]
        for name in sorted(module.__all__, key=str.lower):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or name.startswith("__"):  # its own section, or the version
                continue
            if id(obj) in shown:
                lines += [f"- `{modname}.{name}`: see `{shown[id(obj)]}`.", ""]
                continue
            shown[id(obj)] = f"{modname}.{name}"
            lines += entry(modname, name, obj)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/API.md differs from the docstrings")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
