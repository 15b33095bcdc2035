"""The aiohttp application behind ``bloomwise serve``: the page, its JSON API and its SVG plots.

Routes (all ``GET``):

==============================  ===========================================================================
``/``                           the page (calculator, paradox explorer, cluster)
``/static/page.css``, ``.js``   its style and script
``/api/plan``                   the calculator (``?n=&p=&m=&k=&layout=``): :func:`bloomwise.web.calculator.calculate`
``/api/plan.svg``               FPR against bits per key for that plan
``/api/paradox``                the explorer (``?prior=&alpha=&bpk=&counters=&cm=&cn=``)
``/api/paradox/posterior.svg``  Fig. 2(a); ``/api/paradox/bits.svg`` Fig. 2(b); ``/api/paradox/counting.svg``
                                Theorem 2
``/api/cluster``                the stats of the proxies in ``?proxies=host:port,...``
``/api/config``                 the proxies given on the command line and the refresh period
==============================  ===========================================================================

Bad input gets ``400`` with ``{"error": ..., "fields": {field: message}}``; an unknown path ``404``; any other
failure ``500`` with a one-line JSON reason (the traceback goes to the server's log, never to the client).
The math runs in worker threads, so a slow plan never blocks the cluster view.
"""
from __future__ import annotations

import asyncio
import functools
import importlib.resources
import logging
import signal
from typing import Callable, Optional, Sequence

from aiohttp import web

from bloomwise.web import calculator, cluster, explorer, figures
from bloomwise.web.inputs import InputError

__all__ = ["make_app", "serve", "start", "REFRESH_SECONDS"]

LOG = logging.getLogger("bloomwise.web")
REFRESH_SECONDS = 2.0
_STATIC = {"page.css": "text/css", "page.js": "text/javascript", "index.html": "text/html"}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_CONFIG_KEY = web.AppKey("config", dict)


def _static_text(name: str) -> str:
    return importlib.resources.files("bloomwise.web").joinpath("static", name).read_text(encoding="utf-8")


def _json_error(status: int, message: str, fields: Optional[dict] = None) -> web.Response:
    return web.json_response({"error": message, "fields": fields or {}}, status=status)


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        response = await handler(request)
    except InputError as error:
        response = web.json_response(error.as_dict(), status=400)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        response = _json_error(error.status, error.reason or "error")
    except asyncio.CancelledError:
        raise
    except Exception:  # the traceback goes to the log only
        LOG.exception("error answering %s", request.path_qs)
        response = _json_error(500, "internal error: the server could not answer this request (see its log)")
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def _in_thread(function: Callable, *args):
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(function, *args))


def _query(request: web.Request) -> dict:
    """The query's fields (the last value of a repeated one)."""
    return {name: request.query.getall(name)[-1] for name in request.query.keys()}


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=_static_text("index.html"), content_type="text/html")


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _STATIC or name == "index.html":
        raise web.HTTPNotFound(reason=f"no static file {name!r}")
    return web.Response(text=_static_text(name), content_type=_STATIC[name])


async def _plan(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(calculator.calculate, _query(request)))


def _svg(text: str) -> web.Response:
    return web.Response(text=text, content_type="image/svg+xml")


@functools.lru_cache(maxsize=128)
def _figure(name: str, fields: tuple) -> str:
    """The SVG of figure ``name`` for these fields; drawing takes ~0.3-1 s, so recent ones are kept (a reload, a
    return to earlier values). Bad fields raise InputError, which is not cached."""
    query = dict(fields)
    if name == "plan":
        values = calculator.read_plan_inputs(query)
        return figures.fpr_figure(calculator.solve(values, values["layout"]))
    answer = explorer.explore(query)
    inputs = answer["inputs"]
    if name == "posterior":
        return figures.posterior_figure(inputs["prior"], answer["fpr"])
    if name == "bits":
        return figures.bits_figure(inputs["prior"], inputs["alpha"], inputs["bpk"])
    return figures.counting_figure(answer["counting"], inputs["prior"], inputs["alpha"])


def _fields(request: web.Request, names: Sequence[str]) -> tuple:
    query = _query(request)
    return tuple((name, query[name].strip()) for name in names if query.get(name, "").strip())


_PLAN_FIELDS = ("n", "p", "m", "k", "layout")
_PARADOX_FIELDS = ("prior", "alpha", "bpk", "counters", "cbits", "cm", "cn")


async def _plan_svg(request: web.Request) -> web.Response:
    return _svg(await _in_thread(_figure, "plan", _fields(request, _PLAN_FIELDS)))


async def _paradox(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(explorer.explore, _query(request)))


async def _paradox_svg(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ("posterior", "bits", "counting"):
        raise web.HTTPNotFound(reason=f"no figure {name!r}")
    return _svg(await _in_thread(_figure, name, _fields(request, _PARADOX_FIELDS)))


async def _cluster(request: web.Request) -> web.Response:
    try:
        addresses = cluster.parse_addresses(request.query.getall("proxies", []))
    except ValueError as error:
        raise InputError({"proxies": str(error)}) from None
    results = await cluster.fetch_all(addresses)
    return web.json_response({"proxies": results, "totals": cluster.totals(results)})


async def _config(request: web.Request) -> web.Response:
    return web.json_response(request.app[_CONFIG_KEY])


def make_app(*, proxies: Sequence[str] = (), refresh_seconds: float = REFRESH_SECONDS) -> web.Application:
    """The application: the page, the API and the plots; ``proxies`` pre-fill the cluster view."""
    app = web.Application(middlewares=[_errors], client_max_size=64 * 1024)
    app[_CONFIG_KEY] = {"proxies": cluster.parse_addresses(proxies), "refresh_seconds": refresh_seconds}
    app.router.add_get("/", _page)
    app.router.add_get("/static/{name}", _static)
    app.router.add_get("/api/plan", _plan)
    app.router.add_get("/api/plan.svg", _plan_svg)
    app.router.add_get("/api/paradox", _paradox)
    app.router.add_get("/api/paradox/{name}.svg", _paradox_svg)
    app.router.add_get("/api/cluster", _cluster)
    app.router.add_get("/api/config", _config)
    return app


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Bind ``app`` to host:port (port 0: any free port); return the runner and the page's URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    return runner, f"http://{shown}:{bound[1]}/"


async def _serve(app: web.Application, host: str, port: int, announce: Callable[[str], None]) -> None:
    runner, url = await start(app, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
            pass
    announce(url)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(host: str = "127.0.0.1", port: int = 8018, *, proxies: Sequence[str] = (),
          refresh_seconds: float = REFRESH_SECONDS, announce: Callable[[str], None] = print) -> None:
    """Serve the page until SIGINT or SIGTERM; ``announce(url)`` is called once the socket is bound."""
    app = make_app(proxies=proxies, refresh_seconds=refresh_seconds)
    asyncio.run(_serve(app, host, port, announce))
