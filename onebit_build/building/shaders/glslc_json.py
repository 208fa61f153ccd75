"""JSON for the shader cache launcher (``glslc.py``) without the json module, whose import
(with re and enum) took about as long as the rest of a cache hit: ``json.dumps(...,
sort_keys=True)``'s text, so every cache key is what json would make, and ``json.loads``
of one document, both through the interpreter's own accelerator module (``_json``). Written
beside the launcher into a build folder as its own module; the standard library only."""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover - an interpreter without the accelerator
    from json.decoder import JSONDecoder as _Decoder
    from json.encoder import encode_basestring_ascii as _quote

    def _make_scanner(_ctx):
        return _Decoder().scan_once


def dumps(value) -> str:
    """``json.dumps(value, sort_keys=True)`` for what the launcher writes (None, bools, ints,
    strings, lists, tuples, dicts with string keys), without the json module. Pure."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quote(k)}: {dumps(value[k])}" for k in sorted(value)) + "}"
    raise TypeError(f"cannot write a {type(value).__name__}")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number the launcher writes")


class _ScanContext:  # what the accelerator's scanner reads from json's decoder
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)


def loads(text: str):
    """``json.loads(text)`` for one JSON document, without the json module; ValueError when
    ``text`` is not one. Pure."""
    try:
        value, end = _make_scanner(_ScanContext())(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if text[end:].strip():
        raise ValueError("extra data after the JSON document")
    return value
