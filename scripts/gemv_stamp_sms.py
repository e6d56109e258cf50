#!/usr/bin/env python3
"""Where each decode GEMV launch's blocks ran, from a DSINFER_GEMV_STAMPS file: per launch shape (rows, K,
SwiGLU), the launches grouped by how many distinct SMs their blocks used and the most blocks one SM held, with
the medians over each group of: the blocks' median start, the median and the last block end, all in us from
the launch's first PDL wait return. A launch planned at two blocks an SM that lands on half the SMs shows here
(the sixty-first session's V2-Lite o: 64-71 SMs, docs/benchmarks.md). Launches without GEMV blocks (the routing,
GQA warp-kernel, MLA attention and MLA merge + W_UV records: 0 tiles, or rows = decode tokens, under 16) are
left out.
Usage: gemv_stamp_sms.py STAMPS_FILE
"""
import collections
import statistics
import sys

from gemv_stamps_file import read_launches


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    groups = collections.defaultdict(list)
    for launch in read_launches(sys.argv[1]):
        blocks = [(sm, t) for _, sm, _, t in launch["blocks"] if t[0] >= 0 and t[5] >= 0]
        if launch["rows"] < 16 or launch["tiles"] == 0 or not blocks:
            continue
        per_sm = collections.Counter(sm for sm, _ in blocks)
        wait = min(t[2] for _, t in blocks)
        starts = [t[0] - wait for _, t in blocks]
        ends = [t[5] - wait for _, t in blocks]
        key = (launch["rows"], launch["K"], launch["swiglu"])
        groups[key].append((len(per_sm), max(per_sm.values()), statistics.median(starts),
                            statistics.median(ends), max(ends)))
    print(f"{'rows':>7} {'K':>6} {'swiglu':>6} {'SMs':>4} {'max/SM':>6} {'launches':>8} "
          f"{'start':>7} {'med end':>8} {'last end':>8}")
    for key in sorted(groups):
        by_sms = collections.defaultdict(list)
        for sms, most, start, med_end, last_end in groups[key]:
            by_sms[(sms, most)].append((start, med_end, last_end))
        for (sms, most), rows in sorted(by_sms.items()):
            start, med_end, last_end = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{key[0]:>7} {key[1]:>6} {int(key[2]):>6} {sms:>4} {most:>6} {len(rows):>8} "
                  f"{start:>7.2f} {med_end:>8.2f} {last_end:>8.2f}")


if __name__ == "__main__":
    main()
