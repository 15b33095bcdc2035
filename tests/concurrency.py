"""Helpers for the tests of single-key writers racing batch writers in other threads."""
import functools
import threading

import numpy as np


def add_beside_workers(add, keys, workers, timeout=60.0) -> None:
    """Call ``add(key)`` for every key while each ``workers[i](stop)`` runs in a thread of its own (a bounded loop
    that returns once the ``stop`` event is set); then set it, join every thread within ``timeout`` seconds each,
    and fail if one is still alive."""
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(stop,)) for work in workers]
    for t in threads:
        t.start()
    try:
        for key in keys:
            add(key)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread did not stop"


def batch_inserters(update, threads=2, batches=30, size=4000):
    """(workers, inserted): ``threads`` workers for add_beside_workers, each calling ``update`` on ``batches``
    batches of ``size`` new uint64 keys of its own (a bounded loop that stops early once ``stop`` is set), and the
    list the batches are appended to once inserted."""
    inserted = []

    def insert(own, stop):
        for batch in own:
            if stop.is_set():
                return
            update(batch)
            inserted.append(batch)

    own = [[np.arange(b * size, (b + 1) * size, dtype=np.uint64) + (t + 1) * 2**40 for b in range(batches)]
           for t in range(threads)]
    return [functools.partial(insert, keys) for keys in own], inserted
