"""The ``--listen HOST:PORT`` reader shared by the commands that serve (``bloomwise proxy``, ``bloomwise serve``)."""
from __future__ import annotations

__all__ = ["parse_listen"]


def parse_listen(text: str, example_port: int = 3128) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or a bare ``PORT`` (on 127.0.0.1) -> (host, port); port 0: any free port.

    :param example_port: the port the error message shows in its examples (the command's default).
    :raises ValueError: naming ``--listen`` and the text, with examples.

    >>> parse_listen("127.0.0.1:0"), parse_listen("[::1]:8080"), parse_listen("9000"), parse_listen("cache1:3128")
    (('127.0.0.1', 0), ('::1', 8080), ('127.0.0.1', 9000), ('cache1', 3128))
    """
    raw = str(text).strip()
    if raw.isascii() and raw.isdigit():
        host, port_text = "127.0.0.1", raw
    elif raw.startswith("["):
        host, _, port_text = raw[1:].partition("]:")
    else:
        host, _, port_text = raw.rpartition(":")
    if not host or not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"--listen {text!r} is not HOST:PORT with a port in 0..65535 (examples: "
                         f"127.0.0.1:{example_port}, [::1]:{example_port}, 127.0.0.1:0 for any free port)")
    return host, int(port_text)
