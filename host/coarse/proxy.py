"""Parameter proxies: the communication service on each memory device, and the scheduler that lets proxies
synchronize shards together.

A shard is synchronized when every client has pushed it; the proxies holding contributions must all be
*serving* it at once (a collective among proxies). Two queueing disciplines:

* ``"fcfs"``: a proxy has one queue and serves only its head; if client 0 sends T1 to proxy 0 and T2 to proxy 1
  while client 1 sends T2 to proxy 0 and T1 to proxy 1 (Fig. 10 of the COARSE paper), proxy 0 waits for T1 while
  proxy 1 waits for T2: a deadlock, raised as :class:`SyncDeadlock`.
* ``"per_client"`` (COARSE): one queue per client, all heads served concurrently; since every client pushes its
  shards in the same order, the oldest outstanding shard is always at the head of every queue holding it.
"""

from collections import deque

from ...sim.golden.coarse import proxy_reduce

__all__ = ["Proxy", "ProxyScheduler", "SyncDeadlock"]


class SyncDeadlock(RuntimeError):
    """No queued shard can be synchronized: the proxies wait on each other."""


class Proxy:
    """One proxy: queues of ``(key, client)`` pushes and the pushed bytes.

    ``discipline``: ``"per_client"`` (one queue per client) or ``"fcfs"`` (one queue)."""

    def __init__(self, index, discipline="per_client"):
        if discipline not in ("per_client", "fcfs"):
            raise ValueError(f"unknown queue discipline {discipline!r} (per_client or fcfs)")
        self.index, self.discipline = index, discipline
        self.queues = {}
        self.data = {}                  # (key, client) -> bytes
        self.synchronized = 0

    def enqueue(self, client, key, data):
        """A client's push of shard ``key``."""
        if (key, client) in self.data:
            raise ValueError(f"client {client} pushed {key!r} to proxy {self.index} twice")
        q = client if self.discipline == "per_client" else 0
        self.queues.setdefault(q, deque()).append((key, client))
        self.data[(key, client)] = data

    def heads(self):
        """Pushes this proxy is serving now."""
        return {q[0] for q in self.queues.values() if q}

    def holds(self, key):
        """Clients whose push of ``key`` is queued here."""
        return [c for (k, c) in self.data if k == key]

    def pending(self):
        """Number of queued pushes."""
        return sum(len(q) for q in self.queues.values())

    def take(self, key):
        """Remove every push of ``key`` (they must be at queue heads); returns ``[(client, bytes)]``."""
        out = []
        for q in self.queues.values():
            while q and q[0][0] == key:
                _, c = q.popleft()
                out.append((c, self.data.pop((key, c))))
        self.synchronized += 1
        return out


class ProxyScheduler:
    """Synchronizes shards across proxies; ``n_clients`` contributions make a shard complete."""

    def __init__(self, proxies, n_clients, dtype, op):
        self.proxies, self.n_clients, self.dtype, self.op = proxies, n_clients, dtype, op
        self.order = []             # keys in the order they were synchronized

    def ready(self, key):
        """Whether ``key`` can be synchronized now: all clients pushed it and each proxy holding a push serves
        all of its pushes of ``key``."""
        holders = {p.index: p.holds(key) for p in self.proxies}
        if sum(len(c) for c in holders.values()) < self.n_clients:
            return False
        for p in self.proxies:
            held = holders[p.index]
            if not held:
                continue
            heads = p.heads()
            if self.proxies[p.index].discipline == "fcfs":
                # one queue: the whole queue front up to and including every push of key must be key
                q = next(iter(p.queues.values()))
                front = [k for k, _ in list(q)[:len(held)]]
                if front != [key] * len(held):
                    return False
            elif not all((key, c) in heads for c in held):
                return False
        return True

    def step(self):
        """Synchronize every shard that is ready; returns ``{key: reduced bytes}`` (empty if none)."""
        keys = {k for p in self.proxies for q in p.queues.values() for k, _ in list(q)[:1]}
        done = {}
        for key in sorted(keys, key=repr):
            if self.ready(key):
                contributions = {p.index: p.take(key) for p in self.proxies if p.holds(key)}
                done[key] = proxy_reduce(contributions, self.dtype, self.op)
                self.order.append(key)
        return done

    def drain(self):
        """Synchronize until every queue is empty; :class:`SyncDeadlock` if no progress is possible."""
        out = {}
        while any(p.pending() for p in self.proxies):
            done = self.step()
            if not done:
                waiting = {p.index: sorted(p.heads(), key=repr) for p in self.proxies if p.pending()}
                raise SyncDeadlock(f"proxies wait on each other: heads {waiting}")
            out.update(done)
        return out
