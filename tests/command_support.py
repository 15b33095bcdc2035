"""Helpers for tests that run `bloomwise` commands in-process (simulate, trace, build, ...) and for the trace files
they read."""
from __future__ import annotations

import numpy as np

from bloomwise.cli import main

#: one record of libCacheSim's oracleGeneral binary trace: time, object id, size, the 1-based number of the object's
#: next request (-1: none)
ORACLE_GENERAL_RECORD = np.dtype([("time", "<u4"), ("object", "<u8"), ("size", "<u4"), ("next", "<i8")])


def run_command(capsys, *argv):
    """``bloomwise ARGV...`` (each argument str()-ed): (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def oracle_general_bytes(times, objects, sizes, nexts) -> bytes:
    """The records (equal-length sequences or arrays of each field) as an oracleGeneral file's bytes."""
    records = np.zeros(len(objects), dtype=ORACLE_GENERAL_RECORD)
    records["time"], records["object"], records["size"], records["next"] = times, objects, sizes, nexts
    return records.tobytes()
