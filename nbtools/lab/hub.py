"""What the controller's hub knows of its engines, for the waits that start a lab.

ipyparallel's client learns the engines from the hub's connection reply, then from
registration notifications on a SUB socket that it connects only after that reply
(ipyparallel 9.2, Client._connect). An engine whose registration completes in between is
never announced to it: ``client.ids`` stays one short for good and a start waits out its
whole timeout, then blames the network. Asking the hub again closes that gap. (CI once saw
one of four engines over ssh never counted in 120 s on 2 loaded cores; this is one way to
get there; an engine's 5-s wait for the hub's registration reply, REGISTRATION below,
another.)
"""
from __future__ import annotations

import time
import weakref

EVERY_S = 1.0
REPLY_S = 5.0

# An engine sends its registration request once and exits when the hub's reply takes over
# IPEngine.timeout (5 s by default), which a hub on 2 cores busy with engines' and ssh
# logins' starts may miss; an engine over ssh that exits then, before its startup command,
# never connects its lifeline. The lab's own start_timeout bounds the start; this only
# stops an engine giving up first.
REGISTRATION = ["--IPEngine.timeout=60"]

_last: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def catch_up(client, every: float = EVERY_S) -> list:
    """Engine ids the hub has registered that ``client`` missed, now added to it. Asks the hub
    at most once per ``every`` seconds per client (the start loops call it while they wait)."""
    now = time.monotonic()
    if now - _last.get(client, -every) < every:
        return []
    _last[client] = now
    # the same request the client sends when it connects; its reply is the hub's engine list.
    # Private to ipyparallel (9.x): if a later release changes it, or the hub does not answer
    # in REPLY_S (a dead controller), the wait goes on as it did without this.
    try:
        reply = client._send(client._query_stream, "connection_request").result(REPLY_S)
        engines = dict(reply["content"]["engines"])
        missed = {k: v for k, v in engines.items() if int(k) not in client._engines}
    except (AttributeError, KeyError, TypeError, ValueError, OSError, TimeoutError):
        return []
    if missed:
        client._update_engines(missed)
    return sorted(int(k) for k in missed)


def wait_for(client, n: int, timeout: float) -> bool:
    """True once ``client`` knows ``n`` engines (catching up with the hub while it waits),
    False when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while len(client.ids) < n:
        if time.monotonic() > deadline:
            return False
        catch_up(client)
        time.sleep(0.1)
    return True
