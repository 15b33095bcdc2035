"""Helper for the tests of single-key writers racing batch writers in other threads."""
import threading


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
