"""Idle-connection memory, side by side: N connections to Herald (native
CONNECT) and to Mosquitto (MQTT CONNECT, Debian's mosquitto package), each
server's RSS before and after, and its thread count.

    python3 scripts/idle_memory.py 10000     # HERALD_BIN: where herald-server is
"""
import os, socket, struct, subprocess, sys, tempfile, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000

def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1]) * 1024

def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))

def herald_frame(i):
    body = struct.pack(">HHHI", 0, 0, 0, 0)
    return b"HR\x01\x01" + struct.pack(">II", 0, len(body)) + body

def mqtt_frame(i):
    cid = f"c{i}".encode()
    var = b"\x00\x04MQTT\x04\x02\x00\x00"
    payload = struct.pack(">H", len(cid)) + cid
    rem = var + payload
    return b"\x10" + bytes([len(rem)]) + rem

def measure(name, cmd, port, frame):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    before, socks = rss(proc.pid), []
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(frame(i))
        socks.append(s)
    for s in socks:
        s.settimeout(10)
        assert s.recv(64), name
    time.sleep(1)
    after, t = rss(proc.pid), threads(proc.pid)
    for s in socks:
        s.close()
    proc.terminate()
    proc.wait()
    per = (after - before) / N
    print(f"{name}: {N} idle connections, RSS {before/1024:.0f} -> {after/1024:.0f} KiB, {per:.0f} B per connection, {t} threads")
    return per

data = tempfile.mkdtemp()
bin_dir = os.environ.get("HERALD_BIN", "target/release")
h = measure("herald", [f"{bin_dir}/herald-server", "--listen", "127.0.0.1:17777", "--stomp-listen", "127.0.0.1:0", "--mqtt-listen", "127.0.0.1:0", "--mqtt-ws-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0",
            "--stomp-ws-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", data], 17777, herald_frame)
m = measure("mosquitto", ["mosquitto", "-p", "18830"], 18830, mqtt_frame)
print(f"herald / mosquitto per connection: {h/m:.2f}")
