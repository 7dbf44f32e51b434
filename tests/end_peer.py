"""A peer that ends or holds a step as tests/honest_end_test.sh and the sanitizer pass need
(issue 43): python3 end_peer.py PORT INDEX MODE [TRAIN TEST CLASSES]

MODE bye: HELLO with the data facts (default Fashion-MNIST's 60000, 10000, 10), then BYE;
byenodata: the same without data facts; stall: 5 steps of zero gradients, then a pull and
one chunk of a push, then only heartbeats; pullstall: a pull, then only heartbeats.
Prints "registered", then "closed" (bye) or "stalled at step V" and "closed after S" (the
seconds from the stall to the ps closing the connection)."""
import struct, sys, time
from peer import Peer, MSG, vfield
port, index, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
given = tuple(int(x) for x in sys.argv[4:7]) if len(sys.argv) >= 7 else (60000, 10000, 10)
p = Peer(port, timeout=120)
facts = (0, 0, 0) if mode == "byenodata" else given
if p.hello(mode, index, *facts) is None:
    print("refused", flush=True); sys.exit(1)
print("registered", flush=True)
if mode in ("bye", "byenodata"):
    p.simple("BYE")
    while p.read_frame() is not None:
        pass
    print("closed", flush=True)
    sys.exit(0)
v = p.welcome["start_step"]
steps = 5 if mode == "stall" else 0
for _ in range(steps):
    if p.pull(v) is None:
        sys.exit(1)
    p.push(v, 0.0)
    v += 1
if p.pull(v) is None:
    sys.exit(1)
if mode == "stall":
    n = p.welcome["n_params"]
    off, end = p.starts[0], p.starts[1]
    h = vfield(1, MSG["PUSH"]) + vfield(2, v) + vfield(3, off) + vfield(4, end - off)
    p.send(h, struct.pack("<f", 0.0) * (end - off))
t0 = time.monotonic()
print("stalled at step", v, flush=True)
p.s.settimeout(1.0)
while True:
    try:
        p.simple("HEARTBEAT")
    except OSError:
        break
    try:
        data = p.s.recv(1 << 20)
        if not data:
            break
    except TimeoutError:
        continue
    except OSError:
        break
print("closed after %.2f" % (time.monotonic() - t0), flush=True)
