#!/usr/bin/env python3
"""Times a sequencer restart on an existing data directory: from the process start to its
first new block (eth_blockNumber above the head it had), polling every 20 ms. Prints one
line per run. Usage: restart.py BIN CHAIN DATADIR [RUNS]"""
import json, subprocess, sys, time, urllib.request, socket, os, signal

bin_, chain, datadir = sys.argv[1:4]
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 1

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def block_number(url):
    req = urllib.request.Request(url, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=1) as r:
        return int(json.load(r)["result"], 16)

for run in range(runs):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(f"{datadir}.restart{run}.log", "w")
    start = time.monotonic()
    p = subprocess.Popen([bin_, "--chain", chain, "--datadir", datadir, "--http.port", str(port), "--block-time", "250ms"], stdout=log, stderr=subprocess.STDOUT)
    head = None; ready = None; first = None
    while time.monotonic() - start < 600:
        try:
            n = block_number(url)
            if head is None:
                head, ready = n, time.monotonic() - start
            elif n > head:
                first = time.monotonic() - start
                break
        except Exception:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
    print(f"run {run}: RPC up at {ready if ready is None else round(ready,2)} s (head {head}), first new block at {first if first is None else round(first,2)} s", flush=True)
