#!/usr/bin/env python3
"""Phases of the MLA decode attention launches (the wgmma + TMA design) from a DSINFER_GEMV_STAMPS file.

Those launches are recorded as launches of T rows, K = 576 (the latent and rope widths) and 0 tiles, one
"block" per CTA, each with the points start, issued (its early tiles requested), waited (the PDL wait
returned), staged (the queries in shared memory), O done (the last tile's O MMAs) and end (outputs written),
its SM and its tile count. Per launch, medians over its CTAs of: pre (waited - start), queries (staged -
waited), tiles (O done - staged), out (end - O done); and the launch's span, its first wait to its last end.
With the stamped launches around it (the GEMVs, in launch order): before = this launch's first wait - the
previous stamped launch's last end (the MLA prepare kernel and two handoffs, when the previous is q / kv_a),
after = the next stamped launch's first wait - this launch's last end (one handoff when the next is the
merge + W_UV kernel's, which is stamped too). Prints the medians over launches, per (T, CTAs), in us.

When the next stamped launch is the merge + W_UV kernel's (a launch of T rows, K = 512, tiles = 128: its blocks'
points are start, issued, waited, merged, W_UV done, end), a second table gives its phases the same way: gap
(its first wait - the attention's last end), pre, merge (merged - waited), uv (W_UV done - merged), span, and
after (the next stamped launch's first wait, o's, - its last end).
Usage: mla_stamp_phases.py STAMPS_FILE
"""
import collections
import statistics
import sys

from gemv_stamps_file import read_launches

MLA_WIDTH = 576
LATENT, V_HEAD = 512, 128


def is_mla(launch):
    return launch["K"] == MLA_WIDTH and launch["tiles"] == 0 and not launch["swiglu"]


def is_merge(launch):
    return launch["K"] == LATENT and launch["tiles"] == V_HEAD and not launch["swiglu"]


def stamped(launch):
    """The CTAs that recorded every point."""
    return [t for _, _, _, t in launch["blocks"] if min(t) >= 0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    seq = [(launch, stamped(launch)) for launch in read_launches(sys.argv[1])]
    groups = collections.defaultdict(list)
    merges = collections.defaultdict(list)
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
        if i + 1 < len(seq) and is_merge(seq[i + 1][0]) and seq[i + 1][1]:
            merge, blocks = seq[i + 1]
            m_wait = min(t[2] for t in blocks)
            m_end = max(t[5] for t in blocks)
            mrow = {
                "gap": m_wait - last_end,
                "pre": statistics.median(t[2] - t[0] for t in blocks),
                "merge": statistics.median(t[3] - t[2] for t in blocks),
                "uv": statistics.median(t[4] - t[3] for t in blocks),
                "span": m_end - m_wait,
            }
            later = [c for _, c in seq[i + 2:] if c]
            if later:
                mrow["after"] = min(t[2] for t in later[0]) - m_end
            merges[(merge["rows"], merge["grid"])].append(mrow)
    table("attention", ["pre", "queries", "tiles", "out", "span", "before", "after"], groups)
    if merges:
        table("merge + W_UV", ["gap", "pre", "merge", "uv", "span", "after"], merges)


def table(title, cols, groups):
    """Medians over each group's launches of the columns, one line per (T, blocks)."""
    print(title)
    print(f"{'T':>4} {'blocks':>6} {'launches':>8} " + " ".join(f"{c:>8}" for c in cols))
    for (rows, grid), items in sorted(groups.items()):
        cells = []
        for c in cols:
            vals = [r[c] for r in items if c in r]
            cells.append(f"{statistics.median(vals):>8.2f}" if vals else f"{'-':>8}")
        print(f"{rows:>4} {grid:>6} {len(items):>8} " + " ".join(cells))


if __name__ == "__main__":
    main()
