"""A proxy's summary follows what it advertises, as the simulator's do: when the documents advertised drift more
than the resize tolerance (default 10%, Squid's storeDigestResize rule) from the count the summary was sized for,
the next publication re-sizes it to bits_per_entry positions per document and goes out whole; peers replace their
copy and route by it. Real proxies on loopback."""
import argparse
import math

import pytest

from proxy_support import config, get_checked, origin_and_proxies, run, summary_settled
from bloomwise import theory
from bloomwise.cache.summary import SummaryUpdate

BITS_PER_ENTRY = 8
#: A's summary starts sized for 4 MiB / 128 KiB = 32 documents; it is given 300 (the origin's are ~1,500 bytes)
CACHE_SIZE = 4 * 2**20
STARTING_ENTRIES = 32
HELD = 300
ABSENT_PROBES = 20_000


def test_a_proxy_filled_past_its_configured_entries_advertises_a_summary_sized_for_what_it_holds():
    parser = pytest.importorskip("prometheus_client.parser", reason="the test extra has prometheus_client")

    async def scenario():
        # update threshold 0.1%: every new document (of at most 1,000) makes a publication due, so that nothing
        # is left unpublished once the requests end
        a_config = config(name="A", cache_size=CACHE_SIZE, mean_document_size=CACHE_SIZE // STARTING_ENTRIES,
                          bits_per_entry=BITS_PER_ENTRY, update_threshold=0.001)
        async with origin_and_proxies(a_config, config(name="B"), documents=1000) as (origin, (a, b), session):
            assert a.advertised.filter.num_cells == BITS_PER_ENTRY * STARTING_ENTRIES
            held_paths = [f"/doc/{i}" for i in range(HELD)]
            for path in held_paths:
                await get_checked(session, a.url, origin, path)
            await summary_settled(a, b)

            # A: the summary was re-sized, and is sized within 10% of the documents it advertises
            summary = a.stats()["summary"]
            assert len(a.advertised) == HELD and summary["resize_tolerance"] == 0.1
            sized_for = summary["sized_for_documents"]
            assert abs(HELD - sized_for) <= 0.1 * sized_for, summary
            assert summary["num_cells"] == BITS_PER_ENTRY * sized_for and summary["resizes"] >= 1
            assert summary["num_hashes"] == theory.optimal_num_hashes(summary["num_cells"], sized_for,
                                                                      layout="partitioned")
            async with session.get(a.url + "/metrics") as reply:
                families = {f.name: f for f in parser.text_string_to_metric_families(await reply.text())}
            [resizes] = families["bloomwise_summary_resizes"].samples
            assert resizes.name == "bloomwise_summary_resizes_total" and resizes.value == summary["resizes"]
            assert families["bloomwise_summary_bits"].samples[0].value == summary["num_cells"]
            assert families["bloomwise_summary_sized_for_documents"].samples[0].value == sized_for

            # B: its copy of A's summary is that one, about B bits per document A holds
            held = b.node.peer(a.url).summary
            num_bits, num_hashes = held.filter.num_cells, held.filter.num_hashes
            assert (num_bits, num_hashes, held.num_keys) == (summary["num_cells"], summary["num_hashes"], HELD)
            assert BITS_PER_ENTRY / 1.1 <= num_bits / HELD <= BITS_PER_ENTRY / 0.9
            # its false-positive rate is the one of B bits per document: keys A never held, checked against the
            # partitioned filter's exact rate; |measured - p| <= 5 standard deviations of a binomial proportion
            # (a false alarm with probability < 1e-6). Unresized (256 positions, k = 5, for 300 documents): p ~ 0.99.
            expected = theory.false_positive_rate(num_bits, HELD, num_hashes, layout="partitioned")
            assert expected < 0.04
            probes = [f"GET {origin.url}/never/{i}" for i in range(ABSENT_PROBES)]
            measured = sum(key in held for key in probes) / ABSENT_PROBES
            assert abs(measured - expected) <= 5 * math.sqrt(expected * (1 - expected) / ABSENT_PROBES), \
                (measured, expected)

            # B routes by it: every document A holds is a remote hit (no false miss), none goes to the origin
            served = origin.served["doc"]
            for path in held_paths:
                headers = await get_checked(session, b.url, origin, path)
                assert headers["X-Cache"].startswith("REMOTE_HIT") and headers["X-Bloomwise-Peer"] == a.url, path
            assert origin.served["doc"] == served
            stats = b.stats()
            assert stats["remote_hits"] == HELD and stats["origin_fetches"] == 0
            assert stats["peer_queries"] == HELD and stats["false_hits"] == 0
    run(scenario(), timeout=150)


def test_a_resize_goes_out_whole_and_peers_replace_their_copy():
    """Growth past the tolerance makes a publication re-size the summary: a peer holding a version from before
    gets the whole summary (no delta exists across two geometries) and replaces its copy."""
    async def scenario():
        a_config = config(name="A", mean_document_size=64 * 1024, update_threshold=0.001)   # sized for 64
        async with origin_and_proxies(a_config, config(name="B")) as (origin, (a, b), session):
            for i in range(100):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await summary_settled(a, b)
            before = a.stats()["summary"]
            old_copy = b.node.peer(a.url).summary.filter
            # more documents than 1.1 x the count the summary is sized for: some publication re-sized it since
            for i in range(100, 100 + int(1.1 * before["sized_for_documents"]) + 1):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await summary_settled(a, b)
            after = a.stats()["summary"]
            assert after["resizes"] > before["resizes"] and after["num_cells"] > before["num_cells"]
            origin_id = after["origin"]
            async with session.get(a.url + f"/bloomwise/summary?since={before['version']}&origin={origin_id}") \
                    as reply:
                update = SummaryUpdate.from_bytes(await reply.read())
            assert not update.is_delta and update.version == after["version"]
            assert update.num_cells == after["num_cells"] == BITS_PER_ENTRY * after["sized_for_documents"]
            held = b.node.peer(a.url).summary
            assert held.filter is not old_copy and held.filter.num_cells == after["num_cells"]
            assert all(f"GET {origin.url}/doc/{i}" in held for i in range(len(a.advertised)))
    run(scenario())


def test_resize_off_keeps_the_configured_size():
    async def scenario():
        off = config(name="A", mean_document_size=64 * 1024, update_threshold=0.001, resize_tolerance=None)
        async with origin_and_proxies(off, config(name="B")) as (origin, (a, b), session):
            for i in range(100):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await summary_settled(a, b)
            summary = a.stats()["summary"]
            assert summary["resizes"] == 0 and summary["resize_tolerance"] is None
            assert summary["num_cells"] == b.node.peer(a.url).summary.filter.num_cells == BITS_PER_ENTRY * 64
    run(scenario())


@pytest.mark.parametrize("argv, tolerance", [([], 0.1), (["--resize-tolerance", "25%"], 0.25),
                                             (["--resize-tolerance", "0.05"], 0.05),
                                             (["--resize-tolerance", "off"], None)])
def test_resize_tolerance_option(argv, tolerance):
    from bloomwise.cli import cluster, proxy

    args = proxy.register(argparse.ArgumentParser().add_subparsers()).parse_args(argv)
    assert proxy.config_from_args(args).resize_tolerance == tolerance
    # bloomwise cluster passes the option on to each proxy it starts
    cluster_args = cluster.register(argparse.ArgumentParser().add_subparsers()).parse_args(argv)
    forwarded = proxy.register(argparse.ArgumentParser().add_subparsers()).parse_args(
        cluster.proxy_command_options(cluster_args))
    assert proxy.config_from_args(forwarded).resize_tolerance == tolerance


@pytest.mark.parametrize("value, message", [("0", "--resize-tolerance '0' must be a fraction > 0"),
                                            ("nan", "--resize-tolerance 'nan' must be a fraction > 0"),
                                            ("some", "--resize-tolerance 'some' is not a fraction (10%, 0.1) nor "
                                                     "'off'")])
def test_a_bad_resize_tolerance_is_a_usage_error(value, message, capsys):
    from bloomwise.cli import main

    assert main(["proxy", "--listen", "127.0.0.1:0", "--resize-tolerance", value]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_counters_summary_is_re_sized_the_same_way():
    """The paradox policy's 4-bit counters summary: the same rule, and the peer's copy (counters) is replaced."""
    async def scenario():
        a_config = config(name="A", policy="paradox", summary_kind="counters", update_threshold=0.001,
                          cache_size=CACHE_SIZE, mean_document_size=CACHE_SIZE // STARTING_ENTRIES)
        async with origin_and_proxies(a_config, config(name="B", policy="paradox", summary_kind="counters")) \
                as (origin, (a, b), session):
            for i in range(100):
                await get_checked(session, a.url, origin, f"/doc/{i}")
            await summary_settled(a, b)
            summary = a.stats()["summary"]
            assert summary["kind"] == "counters" and summary["resizes"] >= 1
            assert abs(100 - summary["sized_for_documents"]) <= 0.1 * summary["sized_for_documents"]
            held = b.node.peer(a.url).summary
            assert held.kind == "counters" and held.num_keys == 100
            assert held.filter.num_cells == summary["num_cells"] == BITS_PER_ENTRY * summary["sized_for_documents"]
            assert all(f"GET {origin.url}/doc/{i}" in held for i in range(100))
    run(scenario())
