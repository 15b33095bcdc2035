"""``bloomwise serve``: one local page with the sizing calculator, the Bloom-paradox explorer and a cluster's state.

The page is plain HTML, CSS and JavaScript written for bloomwise (``static/``); every number it shows comes from the
server's JSON API, which calls the library (:mod:`bloomwise.theory`, :mod:`bloomwise.paradox`), and every plot is an
SVG that the server draws from the library's numbers. No formula lives in the JavaScript.

Modules (one concern each):

* :mod:`~bloomwise.web.inputs`: readers for the form fields (numbers, sizes, rates) and :class:`InputError`, which
  maps each bad field to a message.
* :mod:`~bloomwise.web.calculator`: the calculator's answer for n, p, m, k and a layout (``GET /api/plan``).
* :mod:`~bloomwise.web.explorer`: the paradox explorer's answer (``GET /api/paradox``).
* :mod:`~bloomwise.web.figures`: the SVG plots (matplotlib's object-oriented API under a lock).
* :mod:`~bloomwise.web.cluster`: addresses of running proxies and their ``GET /bloomwise/stats``, checked.
* :mod:`~bloomwise.web.server`: the aiohttp application and :func:`serve`.

Needs the ``web`` extra (``pip install 'bloomwise[web]'``: aiohttp and matplotlib).
"""
from __future__ import annotations

__all__ = ["make_app", "serve"]


def __getattr__(name):  # aiohttp is imported only when the server is wanted
    if name in __all__:
        from bloomwise.web import server  # aiohttp, the web extra

        return getattr(server, name)
    raise AttributeError(f"module 'bloomwise.web' has no attribute {name!r}")
