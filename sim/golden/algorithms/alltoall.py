"""Direct all-to-all with dimension-ordered routing and forwarding through SRAM.

Every rank sends its segment ``d`` straight towards rank ``d`` along ``topology.route`` (XYZ order on a
torus, the shorter way round a bidirectional ring, port 0 on a unidirectional ring, one hop through a
switch; where both ways round are equally short, the way :func:`~..topology.spread_tie` picks for the source
and destination, so the ``-`` links of size-2 dimensions and half-way hops carry half of that traffic). A
message for a non-neighbour is RECVed by every intermediate rank into a *spare* slot and forwarded in the same
pass (``RECV ... fwd``), never touching NPU memory; the destination RECVs it into slot ``s`` (``s`` = source
rank) and STOREs it to its output segment ``s``.

Program of rank ``r`` (one phase, ``n_blocks = P``, slots ``0..P-1`` for blocks plus 2 spare slots
``P, P+1`` used alternately by forwarding RECVs if any route has more than one hop):

1. ``LOAD r`` (its own segment, copied through SRAM) and ``LOAD d`` for every destination, all at the head
   of the program (the engine's load sequencer prefetches them when the chunk is dispatched, so no SEND
   waits for a memory round trip), then for every destination ``d = r+1, r+2, ...`` (mod P): ``SEND d`` on
   the first hop's port.
2. Every message passing through or ending at ``r``, sorted by (hop number on arrival, source ``s``,
   ``(d - s) mod P``): a RECV (into a spare slot + fwd, or into slot ``s``). Sorting by hop number makes the
   blocking in-order RECVs deadlock free: a hop-``h`` arrival depends only on forwards of hop ``< h``
   arrivals, which every rank performs first. Sorting the rest like the senders' order makes every link carry
   its messages in the order the receiver consumes them (see :func:`~..program.check_link_order`).
3. ``STORE s`` for every source ``s`` (including ``r`` itself).

Message ids are ``(source, destination)``: a shortest route visits a rank at most once.
"""

from ._build import Builder, send, put, recv

__all__ = ["direct_alltoall", "async_alltoall"]


def direct_alltoall(topology):
    """Programs for the direct all-to-all on any topology with routing (ring, torus, switch)."""
    P = topology.n_endpoints
    routes = {(s, d): topology.route(s, d, spread_ties=True) for s in range(P) for d in range(P) if s != d}
    forwarding = any(len(h) > 1 for h in routes.values())
    spares = (P, P + 1) if forwarding else ()
    ports = sorted({p for r in range(P) for p in range(topology.n_ports) if topology.has_tx(r, p)})
    b = Builder(P, "alltoall", "direct", P, P + len(spares))
    b.phase("alltoall-direct", ports)

    def hop_target(rank, port, dst):
        return topology.link(rank, port, dst if topology.routed else None)

    arrivals = {r: [] for r in range(P)}
    for (s, d), hops in routes.items():
        for j, (rank, port) in enumerate(hops):
            nxt, in_port = hop_target(rank, port, d)
            fwd = hops[j + 1] if j + 1 < len(hops) else None
            arrivals[nxt].append((j + 1, s, d, in_port, fwd))
    for r in range(P):
        order = sorted((d for d in range(P) if d != r), key=lambda d: (d - r) % P)
        b.load(r, r, r)
        for d in order:
            b.load(r, d, d)
        for d in order:
            rank, port = routes[(r, d)][0]
            b.add(r, [send(d, d, port, hop_target(rank, port, d)[0], ("a2a", r, d))])
        n_fwd = 0
        for hop, s, d, in_port, fwd in sorted(arrivals[r], key=lambda a: (a[0], a[1], (a[2] - a[1]) % P)):
            if fwd is None:
                b.add(r, [recv(s, s, in_port, ("a2a", s, d))])
            else:
                frank, fport = fwd
                b.add(r, [recv(spares[n_fwd % 2], d, in_port, ("a2a", s, d), False, fport,
                               hop_target(frank, fport, d)[0], ("a2a", s, d))])
                n_fwd += 1
        for s in range(P):
            b.store(r, s, s)
    return b.build()


def async_alltoall(topology):
    """Programs for the asynchronous all-to-all (Sven): every slice is a deposit (PUT), no rank RECVs.

    Rank ``r`` copies its own segment through SRAM (``LOAD r; STORE r``) and, for every destination
    ``d = r+1, r+2, ...`` (mod P), ``PUT d`` into block ``r`` of ``d``'s output; every LOAD stands at the head
    of the program, where the engine prefetches it. A rank's slices
    therefore leave as soon as its own command runs, whatever the other ranks are doing; the destination's
    deposit unit writes each slice to its output (or stages it, in SRAM and then a spill window in memory,
    while its own command is not posted yet), and a command completes when its ``P - 1`` deposits per chunk
    have arrived. Needs every route to be one hop (a switch, or rings of 2 and bidirectional rings of 3):
    a deposit is never forwarded, because a forwarding rank would have to have posted.
    """
    P = topology.n_endpoints
    routes = {(s, d): topology.route(s, d) for s in range(P) for d in range(P) if s != d}
    far = sorted((s, d) for (s, d), hops in routes.items() if len(hops) > 1)
    if far:
        raise ValueError(f"the asynchronous all-to-all needs one-hop routes; {topology.spec} routes "
                         f"{far[0][0]} -> {far[0][1]} over {len(routes[far[0]])} hops (use a switch)")
    b = Builder(P, "alltoall", "async", P, P)
    ports = sorted({p for r in range(P) for p in range(topology.n_ports) if topology.has_tx(r, p)})
    b.phase("alltoall-async", ports)
    for r in range(P):
        order = sorted((d for d in range(P) if d != r), key=lambda d: (d - r) % P)
        b.load(r, r, r)
        for d in order:
            b.load(r, d, d)
        for d in order:
            rank, port = routes[(r, d)][0]
            b.add(r, [put(d, d, port, d, r)])
        b.store(r, r, r)
    return b.build()
