"""The COARSE profiler: latency and bandwidth from a client to every proxy, the routing table and the shard size.

``measure(client, proxy, nbytes) -> seconds`` is any timing source: :func:`model_measure` for path models
(the V100-like and P100-like profiles of :data:`PROFILES`), or a function timing transfers on the RTL.
"""

from dataclasses import dataclass

from ...sim.golden.coarse import PathModel, crossover_size, full_bandwidth_size

__all__ = ["RoutingTable", "Profiler", "PROFILES", "profile_paths", "model_measure", "SIZES"]

#: Sizes the profiler times (4 B to 64 MiB, powers of two).
SIZES = tuple(1 << k for k in range(2, 27))


@dataclass(frozen=True)
class RoutingTable:
    """``threshold`` S (bytes; a tensor smaller than S goes to ``lat_proxy``, others to ``bw_proxy``) and
    ``shard_bytes`` S' (large tensors are cut into shards of this size)."""
    threshold: int
    lat_proxy: int
    bw_proxy: int
    shard_bytes: int

    def proxy_for(self, nbytes):
        """The proxy a tensor of ``nbytes`` goes to."""
        return self.lat_proxy if nbytes < self.threshold else self.bw_proxy


#: Path profiles measured in the paper (Fig. 8): local = the proxy under the client's own switch. Latencies are
#: assumptions (local always lower, as the paper observes); bandwidths are the paper's.
PROFILES = {
    "v100": {"local": (2e-6, 9e9), "remote": (4e-6, 16e9), "proxy_bw": 16e9, "gpu_bw": 9e9},
    "p100": {"local": (2e-6, 25e9), "remote": (4e-6, 18e9), "proxy_bw": 18e9, "gpu_bw": 18e9},
}


def profile_paths(name, n):
    """``paths[client][proxy]`` :class:`PathModel` matrix of profile ``name`` for ``n`` client/device pairs."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} ({', '.join(PROFILES)})")
    prof = PROFILES[name]
    return [[PathModel(*prof["local" if c == d else "remote"]) for d in range(n)] for c in range(n)]


def model_measure(paths):
    """A ``measure`` function timing transfers on a path-model matrix."""
    def measure(client, proxy, nbytes):
        if not (0 <= client < len(paths) and 0 <= proxy < len(paths[client])):
            raise ValueError(f"no path from client {client} to proxy {proxy} ({len(paths)} clients, "
                             f"{len(paths[0]) if paths else 0} proxies)")
        return paths[client][proxy].time(nbytes)
    return measure


class Profiler:
    """Builds a client's :class:`RoutingTable` from timings (paper section III-E).

    Latency = time of the smallest size; bandwidth = largest size / its time. ``LatProxy`` has the lowest
    latency, ``BwProxy`` the highest bandwidth (ties go to the lower index); if they differ, S solves
    ``T_Lat(S) = T_Bw(S)`` by bisection on the measured curves (linear between tested sizes), else S = 0.
    S' is the smallest tested size whose bandwidth to BwProxy reaches ``fraction`` of the best."""

    def __init__(self, measure, n_proxies, sizes=SIZES, fraction=0.95):
        if n_proxies < 1:
            raise ValueError("need at least one proxy")
        self.measure, self.n_proxies, self.sizes, self.fraction = measure, n_proxies, tuple(sizes), fraction
        self.measurements = 0

    def curve(self, client, proxy):
        """Measured times of every tested size."""
        self.measurements += len(self.sizes)
        return [self.measure(client, proxy, s) for s in self.sizes]

    def _interp(self, times):
        sizes = self.sizes

        def t(n):
            if n <= sizes[0]:
                return times[0]
            for k in range(1, len(sizes)):
                if n <= sizes[k]:
                    f = (n - sizes[k - 1]) / (sizes[k] - sizes[k - 1])
                    return times[k - 1] + f * (times[k] - times[k - 1])
            return times[-1] * n / sizes[-1]
        return t

    def table(self, client):
        """The routing table of ``client``."""
        curves = [self.curve(client, p) for p in range(self.n_proxies)]
        latency = [c[0] for c in curves]
        bandwidth = [self.sizes[-1] / c[-1] for c in curves]
        lat_proxy = min(range(self.n_proxies), key=lambda p: (latency[p], p))
        bw_proxy = max(range(self.n_proxies), key=lambda p: (bandwidth[p], -p))
        if lat_proxy == bw_proxy:
            threshold = 0
        else:
            s = crossover_size(self._interp(curves[lat_proxy]), self._interp(curves[bw_proxy]),
                               hi=self.sizes[-1])
            threshold = self.sizes[-1] if s is None else s
        shard = full_bandwidth_size(self.sizes, curves[bw_proxy], self.fraction)
        return RoutingTable(threshold, lat_proxy, bw_proxy, shard)
