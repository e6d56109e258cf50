"""Reads a DSINFER_GEMV_STAMPS file (gemv_stamps.h, write_gemv_stamps): its launches in file order, each a dict
with the header's rows, K, swiglu, grid and tiles, and `blocks`: one (block, sm, tiles, times) tuple per line
that follows, `times` the six points (start, issued, waited, consumed, last issue, end) in us, -1 for a point
before the file's earliest stamp. Summary lines (`#`) are skipped. Used by gemv_stamp_sms.py and
route_stamp_phases.py.
"""


def read_launches(path):
    cur = None
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "launch":
                if cur:
                    yield cur
                cur = {"rows": int(parts[3]), "K": int(parts[5]), "swiglu": parts[7] == "1",
                       "grid": int(parts[9]), "tiles": int(parts[11]), "blocks": []}
            elif cur is not None:
                cur["blocks"].append((int(parts[0]), int(parts[1]), int(parts[2]),
                                      [float(x) for x in parts[3:9]]))
    if cur:
        yield cur
