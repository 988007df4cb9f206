"""Topologies: port numbering, links, attributes, routing and spec parsing."""

from collections import Counter

import pytest

from syncfabric.sim.golden.topology import (INTER_PACKAGE, INTRA_PACKAGE, LinkAttr, Ring, Switch, Torus, parse)


def _link_map(t):
    return {(l.src_rank, l.src_port): (l.dst_rank, l.dst_port) for l in t.links()}


def test_unidirectional_ring_links():
    t = Ring(4)
    assert _link_map(t) == {(r, 0): ((r + 1) % 4, 1) for r in range(4)}
    assert t.n_ports == 2 and t.n_endpoints == 4
    assert not t.has_tx(0, 1) and not t.has_rx(0, 0)
    assert t.neighbor(3, 0) == 0 and t.neighbor(3, 1) is None
    assert [t.next_port(0, d) for d in (1, 2, 3)] == [0, 0, 0]
    assert len(t.route(1, 0)) == 3


def test_bidirectional_ring_links():
    t = Ring(5, bidirectional=True)
    m = _link_map(t)
    assert len(m) == 10
    assert m[(0, 0)] == (1, 1) and m[(0, 1)] == (4, 0)
    # Shorter way round, port 0 (next) on a tie.
    assert [t.next_port(0, d) for d in (1, 2, 3, 4)] == [0, 0, 1, 1]
    assert Ring(4, True).next_port(0, 2) == 0
    assert t.route(0, 3) == ((0, 1), (4, 1))


def test_ring_of_two_bidirectional_has_two_links_each_way():
    m = _link_map(Ring(2, True))
    assert m == {(0, 0): (1, 1), (0, 1): (1, 0), (1, 0): (0, 1), (1, 1): (0, 0)}


def test_torus_numbering_and_links():
    t = Torus(4, 2, 3)
    assert t.n_endpoints == 24 and t.n_ports == 6
    for r in range(24):
        x, y, z = t.coords(r)
        assert r == x + 4 * (y + 2 * z) == t.rank_of(x, y, z)
    m = _link_map(t)
    assert len(m) == 24 * 6
    r = t.rank_of(3, 1, 2)
    assert m[(r, 0)] == (t.rank_of(0, 1, 2), 1)      # local + wraps around
    assert m[(r, 1)] == (t.rank_of(2, 1, 2), 0)
    assert m[(r, 2)] == (t.rank_of(3, 0, 2), 3)
    assert m[(r, 5)] == (t.rank_of(3, 1, 1), 4)
    for (s, p), (d, q) in m.items():
        assert m[(d, q)] == (s, p) if t.dims[p // 2] == 2 else True
        assert q == p ^ 1
    assert [t.port_name(p) for p in range(6)] == ["local+", "local-", "vertical+", "vertical-",
                                                   "horizontal+", "horizontal-"]


def test_torus_size_one_dimensions_have_no_links():
    t = Torus(1, 4, 2)
    assert not any(t.has_tx(0, p) for p in (0, 1))
    assert all(t.has_tx(0, p) for p in (2, 3, 4, 5))
    assert {p for (_, p) in _link_map(t)} == {2, 3, 4, 5}
    with pytest.raises(ValueError, match="no outgoing link on port 0"):
        t.link(0, 0)


def test_torus_xyz_routing():
    t = Torus(4, 4, 4)
    src, dst = t.rank_of(0, 0, 0), t.rank_of(3, 2, 1)
    hops = t.route(src, dst)
    # local first (the short way: -1), then vertical (tie: +), then horizontal.
    assert [p for _, p in hops] == [1, 2, 2, 4]
    assert t.link(*hops[-1])[0] == dst
    for s in range(64):
        for d in range(64):
            assert len(t.route(s, d)) == sum(min(abs(a - b), 4 - abs(a - b))
                                             for a, b in zip(t.coords(s), t.coords(d)))


@pytest.mark.parametrize("spec", ["torus:4x2x2", "torus:4x4x4", "torus:2x2x2", "bidir-ring:8"])
def test_spread_ties_balance_an_all_to_alls_plus_and_minus_links(spec):
    """Always ``+`` on a tie leaves the ``-`` links of a size-2 dimension idle in an all-to-all (torus:4x2x2:
    ports 3 and 5 carry nothing, the busiest link 12 messages); spreading the ties by source and destination
    loads every port of a symmetric torus alike (busiest link 8) with routes just as short."""
    t = parse(spec)
    P = t.n_endpoints
    plain, spread = Counter(), Counter()
    for s in range(P):
        for d in range(P):
            if s == d:
                continue
            hops = t.route(s, d, spread_ties=True)
            assert len(hops) == len(t.route(s, d))               # still a shortest route
            assert t.link(*hops[-1], d if t.routed else None)[0] == d
            spread.update(hops)
            plain.update(t.route(s, d))
    per_port = Counter()
    for (_, p), n in spread.items():
        per_port[p] += n
    if spec == "torus:4x2x2":            # the size-4 dimension carries more than the size-2 ones
        assert per_port[2] == per_port[3] == per_port[4] == per_port[5]
    else:
        assert len(set(per_port.values())) == 1
    assert per_port[0] == per_port[1]
    assert max(spread.values()) < max(plain.values())
    if spec == "torus:4x2x2":
        assert max(plain.values()) == 12 and max(spread.values()) == 8


def test_torus_default_attributes():
    t = Torus(4, 2, 2)
    assert t.link_attr(0, 0) == INTRA_PACKAGE and t.link_attr(0, 3) == INTER_PACKAGE
    assert INTER_PACKAGE.rate == 25 / 200 and INTER_PACKAGE.latency == 500 and INTRA_PACKAGE.latency == 90
    custom = Torus(2, 2, 2, attrs=(LinkAttr(1.0, 10), LinkAttr(0.5, 20), LinkAttr(0.25, 30)))
    assert [custom.link_attr(0, p).latency for p in range(6)] == [10, 10, 20, 20, 30, 30]


def test_switch_routes_by_destination():
    t = Switch(4)
    assert t.routed and t.n_ports == 1
    assert t.link(0, 0, 3) == (3, 0)
    assert len(t.links()) == 12
    assert t.route(1, 2) == ((1, 0),)
    with pytest.raises(ValueError, match="routes by destination"):
        t.link(0, 0)
    with pytest.raises(ValueError, match="itself"):
        t.link(2, 0, 2)


def test_point_to_point_link_checks_destination():
    with pytest.raises(ValueError, match="leads to rank 1, not to destination 2"):
        Ring(4).link(0, 0, 2)


@pytest.mark.parametrize("spec,expected", [
    ("ring:8", Ring(8)), ("bidir-ring:8", Ring(8, True)), ("torus:4x2x2", Torus(4, 2, 2)),
    ("switch:8", Switch(8)), ("TORUS: 4x4", Torus(4, 4, 1)), ("torus:8", Torus(8, 1, 1)),
])
def test_parse(spec, expected):
    t = parse(spec)
    assert t == expected
    assert parse(t.spec) == t
    assert parse(t) is t


@pytest.mark.parametrize("spec,match", [
    ("mesh:4", "bad topology spec"), ("ring", "bad topology spec"), ("ring:x", "bad endpoint count"),
    ("ring:2x2", "bad endpoint count"),
    ("ring:1", ">= 2"), ("switch:0", ">= 2"), ("torus:1x1x1", "at least 2 endpoints"),
    ("torus:2x0x2", "vertical dimension must be"), ("torus:2x2x2x2", "bad torus dimensions"),
    (8, "must be a string"),
])
def test_parse_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        parse(spec)


@pytest.mark.parametrize("kw,match", [(dict(rate=0), "rate"), (dict(rate=1.5), "rate"),
                                      (dict(latency=-1), "latency"), (dict(latency=1.5), "latency")])
def test_link_attr_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        LinkAttr(**kw)


def test_rank_and_port_range_errors():
    with pytest.raises(ValueError, match="rank 4 out of range"):
        Ring(4).neighbor(4, 0)
    with pytest.raises(ValueError, match="port 2 out of range"):
        Ring(4).neighbor(0, 2)
