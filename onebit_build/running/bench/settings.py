"""The bench's defaults and fixed names, in one place: the command line reads them from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class BenchDefaults:
    """What a benchmark does unless told otherwise."""

    rounds: int = 3  # rounds of every variant, interleaved
    decode_tokens: int = 64  # tokens generated per timed request
    prefix_tokens: int = 16  # the baseline's first K tokens every answer must start with
    tie_margin: float = 0.1  # nats; a CPU/Vulkan0 flip at a margin of 0.053 was seen on an H200
    warmup_tokens: int = 8  # tokens of the one warm-up request per server
    ctx_size: int = 2048
    health_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    lock_wait_s: float = 3600.0  # how long --wait without a number waits for the lock


DEFAULTS = BenchDefaults()

BENCH_KIND = "onebit-bench"
BENCH_SCHEMA = 1
PROMPT_NAMES = ("code", "prose", "short")
# Arguments the bench sets itself for every server; a config may not give them.
RESERVED_ARGS = ("-m", "--model", "--host", "--port", "--device", "-dev", "-np", "--parallel")
ALL_DEVICES = "all"
TEXT_KEPT = 240  # characters of generated text kept per sample
