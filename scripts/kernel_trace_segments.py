#!/usr/bin/env python3
"""Per-kernel segments of a decode step from a DSINFER_KERNEL_TRACE file written with DSINFER_KERNEL_TRACE_TAIL=N.

For each kernel of the tail (in start order) the segment is its end minus the end of the kernel before it: what
it adds to the step when kernels overlap under programmatic dependent launch. Kernels are keyed by their short
name and the short name of the kernel before them (the same GEMV after the MLA merge is o, after down it is
q / kv_a), and each key's mean, count and share are printed in the order the keys first appear.

Usage: scripts/kernel_trace_segments.py TRACE [TRACE ...]   (several traces: one column each)
"""
import re
import statistics
import sys


def short(name):
    n = re.sub(r"void |dsinfer::cuda::|\(anonymous namespace\)::|gemv_detail::", "", name)
    return n.split("(")[0].strip()


def tail_spans(path):
    spans, on = [], False
    with open(path) as f:
        for line in f:
            if line.startswith("# the last"):
                on = True
                continue
            if on:
                cols = line.rstrip("\n").split("\t")
                if len(cols) >= 4:
                    spans.append((float(cols[0]), float(cols[1]), short(cols[3])))
    if not spans:
        sys.exit(f"{path}: no kernel tail (run with DSINFER_KERNEL_TRACE_TAIL=N)")
    return spans


def segments(spans):
    order, seg = [], {}
    for (_, prev_end, prev), (_, end, name) in zip(spans, spans[1:]):
        key = f"{name}  [after {prev}]"
        if key not in seg:
            seg[key] = []
            order.append(key)
        seg[key].append(end - prev_end)
    return order, seg


def main(paths):
    if not paths:
        sys.exit(__doc__)
    results = [segments(tail_spans(p)) for p in paths]
    order = []
    for o, _ in results:
        order += [k for k in o if k not in order]
    width = max(len(k) for k in order)
    print(f"{'kernel [after]':<{width}}  " + "  ".join(f"{p[-24:]:>24}" for p in paths))
    for key in order:
        cells = []
        for _, seg in results:
            v = seg.get(key)
            cells.append(f"{statistics.mean(v):>14.2f} us (n {len(v):>3})" if v else f"{'-':>24}")
        print(f"{key:<{width}}  " + "  ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
