"""The commands of the cache system, the page and the reproduction speak alike: usage errors exit 2 as
``bloomwise CMD: message`` naming the option; the synthetic-trace options and --json mean the same everywhere."""
from __future__ import annotations

import json

import pytest

from bloomwise.cli import main

USAGE_ERRORS = [
    (["trace", "--synthetic", "-5", "-o", "-"], "--synthetic"),
    (["trace", "--synthetic", "10", "--shared", "1.5", "-o", "-"], "--shared"),
    (["simulate", "--synthetic", "1000", "--update-threshold", "0"], "--update-threshold"),
    (["simulate", "--synthetic", "1000", "--policy", "bogus"], "--policy"),
    (["simulate", "--synthetic", "1000", "--cache-size", "-5"], "--cache-size '-5'"),
    (["simulate", "--synthetic", "1000", "--zipf", "x"], "--zipf"),
    (["proxy", "--listen", "nowhere"], "--listen"),
    (["proxy", "--update-threshold", "0"], "--update-threshold"),
    (["proxy", "--cache-size", "-1"], "--cache-size '-1'"),
    (["cluster", "--proxies", "0"], "--proxies"),
    (["cluster", "--mean-size=-4KiB"], "--mean-size"),
    (["cluster", "--mean-size", "4KiB", "--update-threshold", "0"], "--update-threshold"),  # 4KiB is a size
    (["serve", "--listen", "nowhere"], "--listen"),
    (["serve", "--refresh", "0"], "--refresh"),
    (["reproduce", "--out", "unused", "--seeds", "0"], "--seeds"),
]


@pytest.mark.parametrize("argv, option", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_exit_2_in_one_style(argv, option, capsys):
    pytest.importorskip("aiohttp", reason="proxy, cluster and serve need the proxy/web extra (aiohttp)")
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"bloomwise {argv[0]}: {option}"), err
    assert "error:" not in err and "Traceback" not in err and err.count("\n") == 1


def test_simulate_takes_the_synthetic_options_of_trace(capsys):
    base = ["simulate", "--synthetic", "1500", "--proxies", "2", "--documents", "800", "--policy", "summary"]
    assert main(base + ["--zipf", "0.7", "--shared", "0.3", "--one-timers", "0.1", "--json"]) == 0
    short = json.loads(capsys.readouterr().out)  # --json alone: the JSON on stdout, nothing else
    assert main(base + ["--zipf-alpha", "0.7", "--shared-fraction", "30%", "--one-timers", "10%", "--json", "-"]) == 0
    long = json.loads(capsys.readouterr().out)
    for a, b in zip(short, long):
        a.pop("seconds"), b.pop("seconds")
    assert short == long and short[0]["requests"] == 1500
    assert main(base + ["--zipf", "1.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["local_hit_ratio"] != short[0]["local_hit_ratio"]  # --zipf is read


def test_simulate_refuses_an_unwritable_json_before_replaying(tmp_path, capsys):
    code = main(["simulate", "--synthetic", "2000", "--json", str(tmp_path / "missing" / "out.json")])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", out  # no table: nothing was replayed
    assert err.startswith("bloomwise simulate: --json") and "no directory" in err


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_trace_is_a_runtime_error_without_errno(kind, tmp_path, capsys):
    path = tmp_path / "t.log"
    if kind == "directory":
        path.mkdir()
    assert main(["trace", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bloomwise trace: {path}: cannot read it (") and "Errno" not in err, err
    assert main(["simulate", "--trace", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bloomwise simulate: --trace {str(path)!r}") and "Errno" not in err, err


@pytest.mark.parametrize("command", ["proxy", "serve"])
def test_an_address_in_use_is_a_runtime_error_without_errno(command, capsys):
    pytest.importorskip("aiohttp", reason="proxy and serve need the proxy/web extra (aiohttp)")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        assert main([command, "--listen", address]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bloomwise {command}: cannot listen on {address}: ") and "Errno" not in err, err


@pytest.mark.parametrize("text, address", [("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:8080", ("::1", 8080)),
                                           ("9000", ("127.0.0.1", 9000)), ("cache1:3128", ("cache1", 3128))])
def test_proxy_and_serve_read_listen_alike(text, address):
    import argparse

    from bloomwise.cli import proxy, serve

    assert proxy.parse_listen is serve.parse_listen and proxy.parse_listen(text) == address
    args = proxy.register(argparse.ArgumentParser().add_subparsers()).parse_args(["--listen", text])
    config = proxy.config_from_args(args)
    assert (config.host, config.port) == address


@pytest.mark.parametrize("text", ["nonsense", "127.0.0.1:70000", "[::1]", ":80", "host:", "\u00b9", "host:\u00b2"])
def test_a_bad_listen_address_names_the_option(text):
    from bloomwise.cli._listen import parse_listen

    with pytest.raises(ValueError, match=r"--listen .* is not HOST:PORT with a port in 0\.\.65535"):
        parse_listen(text)
