"""Host side of COARSE: parameter clients (push/pull, routing, partitioning), proxies (one queue per client),
storage (versions, epoch snapshots), the profiler, the dual-synchronization optimizer, the DENSE baseline and the
BytePS summation service (``docs/coarse.md``)."""
