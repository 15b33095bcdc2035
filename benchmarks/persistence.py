"""load() and save() of a large filter against the I/O floor: reading the file, and writing it (the Speed issue's
"load/save vs the I/O floor").

    .venv/bin/python benchmarks/persistence.py            # a 1 GiB filter, 3 runs (a minute or two)
    .venv/bin/python benchmarks/persistence.py --quick    # 64 MiB, 3 runs: a smoke test (seconds)

The floors, timed in every run next to what they bound:

* read: the file into a buffer allocated (and written) once beforehand, with ``readinto`` (unbuffered ``FileIO``);
  the page cache is warm: every file is read once before the runs, so every figure is memory, not disk;
* write: the same bytes to a new file, then ``fsync`` (``save()`` syncs too: it is atomic and durable); the write
  alone, without the sync, is shown as well.

Reading into a buffer allocated for the read (``numpy.empty``) is shown too: that buffer's pages are new, as a
loaded filter's are, and their first touch is part of any load (the target is on the preallocated floor).

Measured against them: ``BloomFilter.load(path)`` (the payload checksum verified: the target), ``load(verify=False)``,
``bloomwise.load(path, mmap=True)`` (``BloomFilter.open``: a read-only map, checksum verified over the page cache),
``save()``; ``CountingBloomFilter.load`` of a payload of the same size; and the peers' own save/load where they have
them (rbloom ``save``/``Bloom.load``, fastbloom-rs ``save_to_file_with_hashes``/``from_file_with_hashes``,
pybloomfiltermmap3 ``BloomFilter.open`` and ``copy``), sized for about as many bytes. Each ratio is taken within a run
(time over the floor of the same run, per byte), then its median over the runs.

Before the runs, one load is timed on its own: the first load of a process gets fresh memory from the system, whose
first touch can cost far more than the read on a virtual machine (the host backs the pages then). It is reported,
not part of the target. The resident memory a load adds (peak, through /proc/self/clear_refs) is measured after the
runs: the payload read once into the filter's own memory is 1x; a read buffer copied into the filter would be 2x.
Results: ``results/YYYY-MM-DD-persistence-<cpu>.md`` and ``.json`` (with the kernel set and the load average).
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import targets  # noqa: E402

import bloomwise  # noqa: E402

READ_CHUNK = 1 << 30  # read(2) moves at most about 2 GiB per call


def timed_s(fn, *args) -> tuple[float, object]:
    ns, result = measure.timed(fn, *args)
    return ns / 1e9, result


def read_floor(path: Path, buffer: bytearray) -> None:
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        done = 0
        while done < len(buffer):
            n = file.readinto(view[done:done + READ_CHUNK])
            if not n:
                raise RuntimeError(f"{path} is shorter than {len(buffer)} bytes")
            done += n


def write_floor(path: Path, buffer: bytearray, sync: bool) -> None:
    view = memoryview(buffer)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while view.nbytes:
            view = view[os.write(fd, view[:READ_CHUNK]):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def blake2b_int(key: int) -> int:  # rbloom saves only filters with a hash_func of their own
    return int.from_bytes(hashlib.blake2b(key.to_bytes(8, "little"), digest_size=16).digest(), "little", signed=True)


def make_peers(nbytes: int, where: Path, keys: np.ndarray) -> dict:
    """Each available peer: a filter of about ``nbytes`` bytes at 1% holding ``keys``, and its save and load."""
    capacity = int(nbytes * 8 * np.log(2) ** 2 / -np.log(0.01))
    few = [int(k) for k in keys[:10_000]]
    peers = {}
    try:
        import rbloom
    except ImportError:
        rbloom = None
    if rbloom is not None:
        f = rbloom.Bloom(capacity, 0.01, hash_func=blake2b_int)
        f.update(few)
        path = where / "rbloom.bin"
        f.save(str(path))
        peers["rbloom"] = {"save": lambda p, f=f: f.save(str(p)),
                           "load": lambda p: rbloom.Bloom.load(str(p), blake2b_int), "path": path}
    try:
        import fastbloom_rs
    except ImportError:
        fastbloom_rs = None
    if fastbloom_rs is not None:
        f = fastbloom_rs.BloomFilter(capacity, 0.01)
        f.add_int_batch(keys[:10_000])
        path = where / "fastbloom.bin"
        f.save_to_file_with_hashes(str(path))
        peers["fastbloom-rs"] = {"save": lambda p, f=f: f.save_to_file_with_hashes(str(p)),
                                 "load": lambda p: fastbloom_rs.BloomFilter.from_file_with_hashes(str(p)),
                                 "path": path}
    try:
        import pybloomfilter
    except ImportError:
        pybloomfilter = None
    if pybloomfilter is not None:
        path = where / "pybloomfilter.bin"
        f = pybloomfilter.BloomFilter(capacity, 0.01, str(path))
        f.update(few)
        f.sync()

        def open_and_close(p):
            g = pybloomfilter.BloomFilter.open(str(p), "r")
            g.close()

        def copy(p, f=f):
            f.copy(str(p)).close()

        peers["pybloomfiltermmap3"] = {"save": copy, "load": open_and_close, "path": path, "mapped": True}
    for peer in peers.values():
        peer["bytes"] = os.path.getsize(peer["path"])
    return peers


def one_run(ctx: dict) -> dict:
    """Every figure of one run, in seconds; the floors first."""
    out = {}
    path, buffer, scratch = ctx["path"], ctx["buffer"], ctx["dir"] / "scratch.bin"
    out["floor: read"] = timed_s(read_floor, path, buffer)[0]
    out["floor: read into a new buffer"] = timed_s(lambda: read_floor(path, np.empty(len(buffer), np.uint8)))[0]
    gc.collect()
    for name, call in (("load", lambda: bloomwise.BloomFilter.load(path)),
                       ("load(verify=False)", lambda: bloomwise.BloomFilter.load(path, verify=False)),
                       ("load(mmap=True)", lambda: bloomwise.load(path, mmap=True)),
                       ("CountingBloomFilter.load", lambda: bloomwise.CountingBloomFilter.load(ctx["counting"]))):
        seconds, loaded = timed_s(call)
        out[f"bloomwise {name}"] = seconds
        if hasattr(loaded, "close"):
            loaded.close()
        del loaded
        gc.collect()
    unlink(scratch)  # the writes last: they fill the page cache with dirty pages that the loads would compete with
    out["floor: write + fsync"] = timed_s(write_floor, scratch, buffer, True)[0]
    unlink(scratch)
    out["floor: write (no fsync)"] = timed_s(write_floor, scratch, buffer, False)[0]
    unlink(scratch)
    out["bloomwise save"] = timed_s(ctx["filter"].save, scratch)[0]
    unlink(scratch)
    for name, peer in ctx["peers"].items():
        seconds, loaded = timed_s(peer["load"], peer["path"])
        out[f"{name} load"] = seconds
        del loaded
        gc.collect()
        out[f"{name} save"] = timed_s(peer["save"], scratch)[0]
        unlink(scratch)
    return out


def floor_of(figure: str) -> str:
    return "floor: read" if "load" in figure or figure.startswith("floor: read") else "floor: write + fsync"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=1024, help="the filter's payload in MiB (default 1024)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a 64 MiB filter")
    p.add_argument("--no-peers", action="store_true", help="bloomwise and the floors only")
    p.add_argument("--dir", type=Path, default=None,
                   help="where the files are written (default: a new temporary directory, removed at the end)")
    p.add_argument("--out", type=Path, default=None, help="where the results go (default results/, "
                   "results/quick/ with --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.mib = 64
    args.out = args.out or measure.default_out(args.quick)
    load_before = measure.loadavg()
    where = Path(tempfile.mkdtemp(prefix="bloomwise-persistence-", dir=args.dir))
    try:
        data = measure_all(args, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    data["meta"].update(load_before=load_before, load_after=measure.loadavg())
    data["targets"] = targets.check_persistence(data)
    return measure.finish(args.out, "persistence", data, markdown)


def measure_all(args, where: Path) -> dict:
    nbytes = args.mib << 20
    keys = np.random.default_rng(2024).integers(0, 2**63, size=1_000_000, dtype=np.uint64)
    f = bloomwise.BloomFilter.from_size(nbytes * 8, 7, layout="blocked")
    f.update(keys)
    path = where / "bloom.bw"
    f.save(path)
    counting = bloomwise.CountingBloomFilter.from_size(nbytes * 2, 4, counter_bits=4, layout="classic")
    counting.update(keys[:100_000])
    counting_path = where / "counting.bw"
    counting.save(counting_path)
    del counting
    peers = {} if args.no_peers else make_peers(nbytes, where, keys)
    ctx = {"path": path, "counting": counting_path, "filter": f, "dir": where, "peers": peers,
           "buffer": bytearray(os.path.getsize(path))}
    for file in [path, counting_path] + [peer["path"] for peer in peers.values()]:  # warm the page cache
        with open(file, "rb", buffering=0) as handle:
            while handle.read(READ_CHUNK):
                pass
    read_floor(path, ctx["buffer"])  # the floor's buffer: allocated and written once, before the runs
    first_load = timed_s(bloomwise.BloomFilter.load, path)[0]  # fresh memory from the system (see the docstring)
    gc.collect()
    runs = []
    for r in range(args.runs):
        runs.append(one_run(ctx))
        print(f"run {r + 1}/{args.runs} done", file=sys.stderr)
    peak = measure.PeakRSS()
    base = peak.start()
    loaded = bloomwise.BloomFilter.load(path)
    grew = peak.peak_since(base)
    assert loaded == f, "the loaded filter differs from the saved one"
    del loaded
    sizes = {"bloomwise": os.path.getsize(path), "counting": os.path.getsize(counting_path)}
    sizes.update({name: peer["bytes"] for name, peer in peers.items()})
    figures = {name: measure.summary([run[name] for run in runs]) for name in runs[0]}
    ratios = {}  # per byte, against the floor of the same run
    for name in runs[0]:
        if name in ("floor: read", "floor: write + fsync", "floor: write (no fsync)"):
            continue
        owner = name.split(" ")[0]
        size = sizes["counting"] if "Counting" in name else sizes.get(owner, sizes["bloomwise"])
        floor = floor_of(name)
        ratios[name] = measure.summary([(run[name] / size) / (run[floor] / sizes["bloomwise"]) for run in runs])
    ratios["bloomwise load vs reading into a new buffer"] = measure.summary(
        [run["bloomwise load"] / run["floor: read into a new buffer"] for run in runs])
    return {"meta": {"machine": measure.machine(), "kernels": measure.bloomwise_kernels(), "mib": args.mib,
                     "runs": args.runs, "page_cache": "warm: every file read once before the runs",
                     "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "command": " ".join(sys.argv), "file_bytes": sizes,
                     "mapped": sorted(name for name, peer in peers.items() if peer.get("mapped"))},
            "figures": figures, "ratios": ratios, "first_load_s": first_load,
            "load_rss_growth": None if grew is None else grew / f.nbytes, "payload_bytes": f.nbytes}


def markdown(data: dict) -> str:
    m = data["meta"]
    mach = m["machine"]
    lines = [f"# load/save vs the I/O floor: a {m['mib']} MiB filter, {m['runs']} run(s), {m['date']}", "",
             f"CPU {mach['cpu']} ({mach['cpus']} CPUs; AVX-512: {'yes' if mach['avx512'] else 'no'}); "
             f"bloomwise kernels: {m['kernels']}; Python {mach['python']}, numpy {mach['numpy']}; "
             f"load average before {m['load_before']}, after {m['load_after']}. Page cache {m['page_cache']}; "
             f"the read floor's buffer is allocated once, before the runs.", "",
             "| figure | file | median | min | max | GB/s | ratio to its floor (per byte, median of runs) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    sizes = m["file_bytes"]
    for name, s in data["figures"].items():
        owner = name.split(" ")[0]
        size = sizes["counting"] if "Counting" in name else sizes.get(owner, sizes["bloomwise"])
        ratio = data["ratios"].get(name)
        note = " (memory map)" if owner in m["mapped"] or "mmap" in name else ""
        lines.append(f"| {name}{note} | {size / 2**20:,.0f} MiB | {s['median'] * 1e3:,.1f} ms | "
                     f"{s['min'] * 1e3:,.1f} | {s['max'] * 1e3:,.1f} | {size / s['median'] / 1e9:.2f} | "
                     f"{'' if ratio is None else format(ratio['median'], '.2f') + 'x vs ' + floor_of(name)} |")
    target = data["ratios"].get("bloomwise load")
    if target:
        lines += ["", "load (verify) over the read floor, run by run: "
                  + ", ".join(f"{r:.2f}x" for r in target["runs"]) + " (the target takes their median); over "
                  "reading into a new buffer: " + ", ".join(
                      f"{r:.2f}x" for r in data["ratios"]["bloomwise load vs reading into a new buffer"]["runs"])
                  + "."]
    lines += ["", f"First load of the process (fresh memory from the system, before the runs): "
                  f"{data['first_load_s'] * 1e3:,.1f} ms.",
              "Peak resident memory added by one load: " + (
                  "not measured (no /proc/self/clear_refs)" if data["load_rss_growth"] is None else
                  f"{data['load_rss_growth']:.2f}x the payload."), "",
              ] + measure.targets_table(data["targets"], "measured")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
