#!/usr/bin/env python3
"""Phases of the one-token decode routing launches (moe_norm_route) from a DSINFER_GEMV_STAMPS file.

Those launches are recorded as launches of 0 rows, K = the router's experts and tiles = the hidden size;
each CTA's six points are start, waited (the PDL wait returned), normed (1 / rms known), arrived (its logits
out; the selecting CTA: every logit there), selected and end. Per launch: the norm (median normed - median
waited), the logits (latest arrival of the other CTAs - median normed), the handover (the selecting CTA's
arrived - that latest arrival), the selection and the permutation (the selecting CTA), the whole (the selecting
CTA's end - the median waited) and the spread of the CTAs' starts. The launch's last row (one past its CTAs)
holds the selection's steps: scored, groups masked, candidates, ranked, weights written; their spans are printed
as score, groups, cand, rank, weights (score from the selecting CTA's arrival). Prints the medians over
launches, per (E, H).
Usage: route_stamp_phases.py STAMPS_FILE
"""
import statistics
import sys

from gemv_stamps_file import read_launches


def launches(path):
    """The routing launches' CTAs' points and, in the launch's last row, the selection's steps."""
    for launch in read_launches(path):
        launch["H"] = launch["tiles"]
        launch["steps"] = None
        rows = []
        for block, _, _, times in launch["blocks"]:
            if block == launch["grid"] - 1 and launch["rows"] == 0:
                launch["steps"] = times
            else:
                rows.append(times)
        launch["blocks"] = rows
        yield launch


def phases(blocks, steps):
    sel = max(range(len(blocks)), key=lambda i: blocks[i][5])
    others = [b for i, b in enumerate(blocks) if i != sel]
    waited = statistics.median(b[1] for b in blocks)
    normed = statistics.median(b[2] for b in blocks)
    last_other = max(b[3] for b in others) if others else blocks[sel][2]
    s = blocks[sel]
    marks = [s[3]] + (steps[:5] if steps else [s[3]] * 5)
    out = {
        "norm": normed - waited,
        "logits": last_other - normed,
        "handover": s[3] - last_other,
        "select": s[4] - s[3],
        "permute": s[5] - s[4],
        "whole": s[5] - waited,
        "start_spread": max(b[0] for b in blocks) - min(b[0] for b in blocks),
    }
    for i, k in enumerate(["score", "groups", "cand", "rank", "weights"]):
        out[k] = marks[i + 1] - marks[i]
    return out


def main():
    by_e = {}
    for l in launches(sys.argv[1]):
        if l["rows"] != 0 or len(l["blocks"]) < 1:
            continue
        if any(v < 0 for b in l["blocks"] + [(l["steps"] or [])[:5]] for v in b):
            continue
        by_e.setdefault((l["K"], l["H"]), []).append(phases(l["blocks"], l["steps"]))
    keys = ["norm", "logits", "handover", "select", "permute", "whole", "start_spread", "score", "groups",
            "cand", "rank", "weights"]
    print("%5s %5s %8s " % ("E", "H", "launches") + " ".join("%8s" % k for k in keys))
    for e, ps in sorted(by_e.items()):
        print("%5d %5d %8d " % (e[0], e[1], len(ps)) + " ".join("%8.2f" % statistics.median(p[k] for p in ps) for k in keys))


if __name__ == "__main__":
    main()
