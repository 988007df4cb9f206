"""BytePS on the host side: workers' tensors cut into parts, each part placed on one summation service by
bucket (CPU machines and GPU machines), summed there when all ``n`` workers pushed it, pulled back; or, in the
asynchronous mode (paper section 5, Fig. 11b), each worker's delta parameters added at once to the latest
parameters its services hold, which the push answers."""

import numpy as np

from ...sim.golden.byteps import SummationService, place_parts, split_parts

__all__ = ["BytePSCluster"]


class BytePSCluster:
    """``n`` GPU machines (workers, each also running a summation service) and ``k`` CPU machines (summation
    services only). ``push(worker, tensors)`` sends a worker's tensors (a list of byte arrays, the same sizes
    on every worker); once every worker pushed, ``pull(worker)`` returns the summed tensors.

    ``bytes_summed[("cpu"|"gpu", j)]`` counts the bytes each service summed (one contribution's worth per
    part), to compare with ``M_cpu`` / ``M_gpu``.

    ``asynchronous=True``: the services hold the latest parameters; ``push(worker, deltas)`` adds a worker's
    delta parameters to them at once (the first push of a part sets them: the initial parameters ``w0``) and
    returns the latest parameters, which ``pull(worker)`` also returns, without waiting for other workers.

    ``service``: None (every machine's summation service is the golden model) or an
    :class:`~syncfabric.host.coarse.summation.RtlSummationService` for ``n`` workers of the same mode, element
    type and operator: every machine's service is then a share of the RTL service's parts
    (:meth:`~syncfabric.host.coarse.summation.RtlSummationService.server`), each part's bytes checked against the
    golden service; ``part_bytes`` must fit one of its parts."""

    def __init__(self, n, k, dtype="fp32", op="sum", part_bytes=4 << 20, asynchronous=False, service=None):
        self.n, self.k, self.part_bytes, self.asynchronous = n, k, part_bytes, asynchronous
        keys = [("cpu", j) for j in range(k)] + [("gpu", j) for j in range(n)]
        if service is None:
            self.services = {key: SummationService(n, dtype, op, asynchronous) for key in keys}
        else:
            golden = SummationService(n, dtype, op, asynchronous)
            want = (n, golden.dtype, golden.op, bool(asynchronous))
            got = (service.n, service.dtype, service.op, service.asynchronous)
            if got != want:
                raise ValueError(f"the RTL service serves (workers, dtype, op, asynchronous) {got}, the cluster "
                                 f"needs {want}")
            if part_bytes > service.part_bytes:
                raise ValueError(f"parts of {part_bytes} bytes do not fit the RTL service's {service.part_bytes}-"
                                 f"byte parts")
            self.services = {key: service.server() for key in keys}
        self.bytes_summed = {s: 0 for s in self.services}
        self.parts = None
        self.results = {}

    def _layout(self, tensors):
        sizes = [np.asarray(t).view(np.uint8).size for t in tensors]
        parts = split_parts(sizes, self.part_bytes)
        if self.parts is None:
            self.parts = parts
            self.placement = place_parts(len(parts), self.n, self.k)
        elif parts != self.parts:
            raise ValueError("every worker must push tensors of the same sizes")
        return sizes

    def push(self, worker, tensors):
        """Push every tensor of ``worker``; parts that are now complete are summed and kept for the pull.
        Asynchronous mode: returns the latest parameters (as :meth:`pull`)."""
        if not 0 <= worker < self.n:
            raise ValueError(f"worker {worker} outside 0..{self.n - 1}")
        self._layout(tensors)
        raw = [np.asarray(t).view(np.uint8).reshape(-1) for t in tensors]
        for i, (t, off, ln) in enumerate(self.parts):
            server = self.placement[i]
            out = self.services[server].push(i, worker, raw[t][off:off + ln])
            if out is not None:
                self.results[i] = out
                self.bytes_summed[server] += ln
        if self.asynchronous:
            return self.pull(worker)

    def pull(self, worker):
        """The summed tensors (a list of byte arrays); every part must be complete."""
        if self.parts is None:
            raise RuntimeError("nothing was pushed")
        missing = [i for i in range(len(self.parts)) if i not in self.results]
        if missing:
            raise RuntimeError(f"{len(missing)} parts still wait for contributions (first: part {missing[0]})")
        sizes = {}
        for t, off, ln in self.parts:
            sizes[t] = max(sizes.get(t, 0), off + ln)
        out = [np.empty(sizes[t], np.uint8) for t in sorted(sizes)]
        for i, (t, off, ln) in enumerate(self.parts):
            out[t][off:off + ln] = self.results[i]
        return out
