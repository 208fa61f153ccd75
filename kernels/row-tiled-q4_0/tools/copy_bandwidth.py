#!/usr/bin/env python3
"""Device-to-device copy bandwidth of GPU 0 through PyTorch: bytes read plus bytes written over
the median time of REPS copies of a SIZE_GIB buffer, timed with CUDA events. Prints GB/s."""

import statistics
import sys

import torch


def main() -> int:
    size_gib = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    nbytes = int(size_gib * (1 << 30))
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    if not torch.equal(dst[:1 << 20], src[:1 << 20]):
        print("copy check failed")
        return 1
    t = statistics.median(times)
    print(f"copy {size_gib:g} GiB x {reps}: median {t * 1e3:.3f} ms, {2 * nbytes / t / 1e9:.0f} GB/s (read + write)")
    print(f"bandwidth_gbs {2 * nbytes / t / 1e9:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
