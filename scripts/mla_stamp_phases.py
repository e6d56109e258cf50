#!/usr/bin/env python3
"""Phases of the MLA decode attention launches (the wgmma + TMA design) from a DSINFER_GEMV_STAMPS file.

Those launches are recorded as launches of T rows, K = 576 (the latent and rope widths) and 0 tiles, one
"block" per CTA, each with the points start, issued (its early tiles requested), waited (the PDL wait
returned), staged (the queries in shared memory), O done (the last tile's O MMAs) and end (outputs written),
its SM and its tile count. Per launch, medians over its CTAs of: pre (waited - start), queries (staged -
waited), tiles (O done - staged), out (end - O done); and the launch's span, its first wait to its last end.
With the stamped launches around it (the GEMVs, in launch order): before = this launch's first wait - the
previous stamped launch's last end (the MLA prepare kernel and two handoffs, when the previous is q / kv_a),
after = the next stamped launch's first wait - this launch's last end (the merge + W_UV kernel and two
handoffs, when the next is o). Prints the medians over launches, per (T, CTAs), in us.
Usage: mla_stamp_phases.py STAMPS_FILE
"""
import collections
import statistics
import sys

from gemv_stamps_file import read_launches

MLA_WIDTH = 576


def is_mla(launch):
    return launch["K"] == MLA_WIDTH and launch["tiles"] == 0 and not launch["swiglu"]


def stamped(launch):
    """The CTAs that recorded every point."""
    return [t for _, _, _, t in launch["blocks"] if min(t) >= 0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    seq = [(launch, stamped(launch)) for launch in read_launches(sys.argv[1])]
    groups = collections.defaultdict(list)
    for i, (launch, ctas) in enumerate(seq):
        if not is_mla(launch) or not ctas:
            continue
        first_wait = min(t[2] for t in ctas)
        last_end = max(t[5] for t in ctas)
        row = {
            "pre": statistics.median(t[2] - t[0] for t in ctas),
            "queries": statistics.median(t[3] - t[2] for t in ctas),
            "tiles": statistics.median(t[4] - t[3] for t in ctas),
            "out": statistics.median(t[5] - t[4] for t in ctas),
            "span": last_end - first_wait,
        }
        before = [c for _, c in seq[:i] if c]
        after = [c for _, c in seq[i + 1:] if c]
        if before:
            row["before"] = first_wait - max(t[5] for t in before[-1])
        if after:
            row["after"] = min(t[2] for t in after[0]) - last_end
        groups[(launch["rows"], launch["grid"])].append(row)
    cols = ["pre", "queries", "tiles", "out", "span", "before", "after"]
    print(f"{'T':>4} {'CTAs':>5} {'launches':>8} " + " ".join(f"{c:>8}" for c in cols))
    for (rows, grid), items in sorted(groups.items()):
        cells = []
        for c in cols:
            vals = [r[c] for r in items if c in r]
            cells.append(f"{statistics.median(vals):>8.2f}" if vals else f"{'-':>8}")
        print(f"{rows:>4} {grid:>5} {len(items):>8} " + " ".join(cells))


if __name__ == "__main__":
    main()
