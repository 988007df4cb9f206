"""Step-level time of one chunk through one phase of the golden programs, as the RTL's FSMs run it.

The collective model (:mod:`.collective`) books a phase's traffic on shared resources (links, memory, ALU);
what it cannot read off those is how long a chunk alone takes to cross the phase: the steps an FSM issues one
after another, the messages it waits for, the hops a forwarded message takes. :func:`phase_step_times`
replays every rank's steps of each phase for one chunk, with every rank starting the phase together:

* every step costs its FSM ``step_cycles`` before it issues (decode and grant);
* a SEND (or PUT) streams its block out of its port at the port's rate, after the port's previous message;
  the FSM takes its next step once the last beat has left (a step issues when nothing of its FSM is in
  flight);
* a message's first beat reaches the next rank a link latency after it left (two through a switch: up and
  down), its last beat a latency after the last left;
* a RECV starts when its message's first beat is there and ends when the last beat is in and it has taken
  every beat (one per cycle); its forwarded copy leaves beat by beat as the beats come in (cut through) on
  its own port;
* LOADs and STOREs cost only their step here (the memory port is a shared resource of the model).

The phase's time is when the last rank's last step ends. Landing credits, the TX look-ahead and contention
between chunks are not in it (the collective model's resources and FSM binding add the contention).
"""

from ..golden.program import StepOp
from ..golden.topology import parse as parse_topology

__all__ = ["phase_step_times"]


def phase_step_times(programs, topology, message_beats, step_cycles=7.0):
    """Cycles one chunk takes through each phase of ``programs`` (one per rank) on ``topology`` (its links'
    latencies and rates), with blocks of ``message_beats`` beats (see the module docstring)."""
    topo = parse_topology(topology)
    progs = list(programs)
    hops = 2 if topo.routed else 1
    out = []
    for pi in range(len(progs[0].phases)):
        out.append(_phase_time(progs, pi, topo, hops, float(message_beats), float(step_cycles)))
    return tuple(out)


def _phase_time(progs, pi, topo, hops, m, step):
    n = len(progs)
    steps = [p.phases[pi].steps for p in progs]
    arrivals = {}                               # (receiving rank, key) -> (first beat in, last beat in)
    pc = [0] * n
    now = [0.0] * n                             # when each rank's FSM may issue its next step
    port_free = [{} for _ in range(n)]          # rank -> port -> when its last message's last beat left

    def send(r, port, peer, key, start, not_before_last=0.0):
        attr = topo.link_attr(r, port)
        start = max(start, port_free[r].get(port, 0.0))
        last = max(start + m / attr.rate, not_before_last)
        port_free[r][port] = last
        dst = peer if topo.routed else topo.link(r, port, peer)[0]
        lat = hops * attr.latency
        arrivals[(dst, key)] = (start + lat + 1, last + lat)
        return last

    progress = True
    while progress:
        progress = False
        for r in range(n):
            while pc[r] < len(steps[r]):
                s = steps[r][pc[r]]
                t = now[r] + step
                if s.op in (StepOp.SEND, StepOp.PUT):
                    now[r] = send(r, s.port, s.peer, s.key, t)
                elif s.op == StepOp.RECV:
                    got = arrivals.get((r, s.key))
                    if got is None:
                        break                   # its message is not sent yet: another rank moves first
                    first, last = got
                    start = max(t, first)
                    end = max(start + m, last)
                    if s.fwd is not None:
                        end = max(end, send(r, s.fwd, s.peer, s.fwd_key, start, last + 1))
                    now[r] = end
                else:
                    now[r] = t
                pc[r] += 1
                progress = True
    stuck = [r for r in range(n) if pc[r] < len(steps[r])]
    if stuck:
        raise ValueError(f"phase {pi}: ranks {stuck} wait for messages no rank sends")
    return max(now, default=0.0)
