# A tensorflow-framework job's program for test_agent: no TensorFlow, just
# what a TF cluster does with TF_CONFIG.  Every worker listens at its own
# cluster entry's port and connects to every other worker's entry, so each
# entry must be a reachable address and a port reserved for that worker
# alone.  Prints "worker I met all N workers" on success, exits 1 otherwise.
import json
import os
import socket
import sys
import time

cfg = json.loads(os.environ["TF_CONFIG"])
peers = cfg["cluster"]["worker"]
me = cfg["task"]["index"]
n = len(peers)
assert cfg["task"]["type"] == "worker", cfg
assert n == int(os.environ["WORLD_SIZE"]), (n, os.environ["WORLD_SIZE"])
assert me == int(os.environ["RANK"]), (me, os.environ["RANK"])
assert len(set(peers)) == n, "two workers share an address and port: %s" % peers
assert not [a for a in sys.argv[1:] if a.startswith("--local_rank")], sys.argv
host, port = peers[me].rsplit(":", 1)

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind((host, int(port)))
srv.listen(n)
print("worker %d of %d listening at %s, MASTER_PORT %s"
      % (me, n, peers[me], os.environ["MASTER_PORT"]), flush=True)

deadline = time.time() + 40
for i, peer in enumerate(peers):
    if i == me:
        continue
    h, p = peer.rsplit(":", 1)
    while True:
        try:
            with socket.create_connection((h, int(p)), timeout=2) as c:
                c.sendall(b"%d\n" % me)
            break
        except OSError:
            if time.time() > deadline:
                print("worker %d cannot reach worker %d at %s" % (me, i, peer), flush=True)
                sys.exit(1)
            time.sleep(0.1)

heard = set()
srv.settimeout(max(1.0, deadline - time.time()))
while len(heard) < n - 1:
    c, _ = srv.accept()
    with c:
        heard.add(int(c.makefile().readline()))
assert heard == set(range(n)) - {me}, heard
print("worker %d met all %d workers" % (me, n), flush=True)
