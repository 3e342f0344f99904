"""bench/tls.sh's client: CPU per REGISTER over UDP, TLS and WebSocket, memory per idle TLS and
WebSocket connection. The WebSocket side is written here from RFC 6455 (an upgrade request and
masked text frames), so the bench needs nothing beyond Python's standard library. The figures go
to tls.json in a run directory under bench/out/; --record also copies it to bench/results/ and
appends the summary to bench/RESULTS.md."""
import argparse, base64, os, socket, ssl, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402

ap = argparse.ArgumentParser(description="bench/tls.sh's client: strowger's CPU per REGISTER over UDP, "
                                         "TLS and WebSocket, memory per idle connection")
for name in ("pid", "host", "udp_port", "tls_port", "ca", "regs", "conns", "ws_port"):
    ap.add_argument(name, type=str if name in ("host", "ca") else int)
b.add_record_flag(ap)
args = ap.parse_args()
pid, host, udp_port, tls_port, ca = args.pid, args.host, args.udp_port, args.tls_port, args.ca
regs, conns, ws_port = args.regs, args.conns, args.ws_port
tick = os.sysconf("SC_CLK_TCK")


def cpu_s():
    """strowger's user + system CPU so far, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def register(i, transport, local):
    return (f"REGISTER sip:{host} SIP/2.0\r\n"
            f"Via: SIP/2.0/{transport} {local};branch=z9hG4bK-{transport}-{i}\r\n"
            f"Max-Forwards: 70\r\nFrom: <sip:b{i % 500}@{host}>;tag=t{i}\r\n"
            f"To: <sip:b{i % 500}@{host}>\r\nCall-ID: bench-{transport}-{i % 500}\r\n"
            f"CSeq: {i + 1} REGISTER\r\nContact: <sip:b@{local};transport={transport.lower()}>\r\n"
            f"Expires: 600\r\nContent-Length: 0\r\n\r\n").encode()


def run_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, udp_port))
    local = "%s:%d" % s.getsockname()
    for i in range(regs):
        s.send(register(i, "UDP", local))
        assert b" 200 " in s.recv(65535).split(b"\r\n", 1)[0]


def tls_context():
    ctx = ssl.create_default_context(cafile=ca)
    return ctx


def run_tls():
    raw = socket.create_connection((host, tls_port))
    local = "%s:%d" % raw.getsockname()
    s = tls_context().wrap_socket(raw, server_hostname=host)
    buf = b""
    for i in range(regs):
        s.sendall(register(i, "TLS", local))
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65535)
        head, buf = buf.split(b"\r\n\r\n", 1)
        assert b" 200 " in head.split(b"\r\n", 1)[0], head
    s.close()


def ws_open():
    """A WebSocket to strowger's ws: listener, upgraded with the sip subprotocol."""
    s = socket.create_connection((host, ws_port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}:{ws_port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: sip\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return s


def ws_frame(payload):
    """One masked text frame (a client's, RFC 6455 §5.2)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_read(s, buf):
    """One unmasked server frame's payload, and what is left of `buf`."""
    while True:
        if len(buf) >= 2:
            n, at = buf[1] & 0x7F, 2
            if n == 126:
                n, at = (struct.unpack("!H", buf[2:4])[0], 4) if len(buf) >= 4 else (None, 4)
            if n is not None and len(buf) >= at + n:
                return buf[at:at + n], buf[at + n:]
        buf += s.recv(65535)


def run_ws():
    s = ws_open()
    local = "%s:%d" % s.getsockname()
    buf = b""
    for i in range(regs):
        s.sendall(ws_frame(register(i, "WS", local)))
        msg, buf = ws_read(s, buf)
        assert b" 200 " in msg.split(b"\r\n", 1)[0], msg
    s.close()


results = {}
for name, run in (("UDP", run_udp), ("TLS", run_tls), ("WS", run_ws)):
    c0, t0 = cpu_s(), time.monotonic()
    run()
    c1, t1 = cpu_s(), time.monotonic()
    results[name] = (c1 - c0) / regs * 1e6
    print(f"{name}: {regs} REGISTERs in {t1 - t0:.1f} s, strowger CPU {c1 - c0:.2f} s = "
          f"{results[name]:.1f} µs per REGISTER")
print(f"TLS/UDP CPU per REGISTER: x{results['TLS'] / results['UDP']:.2f}")
print(f"WS/UDP CPU per REGISTER: x{results['WS'] / results['UDP']:.2f}")

time.sleep(1)
before = rss_kib()
ctx = tls_context()
held = []
for _ in range(conns):
    raw = socket.create_connection((host, tls_port))
    held.append(ctx.wrap_socket(raw, server_hostname=host))
time.sleep(2)
after = rss_kib()
print(f"{conns} idle TLS connections: RSS {before} -> {after} KiB, "
      f"{(after - before) / conns:.1f} KiB per connection")
per_conn = {"TLS": (after - before) / conns}

time.sleep(1)
before = rss_kib()
# The TLS connections stay open: memory they would free is not counted again.
held += [ws_open() for _ in range(conns)]
time.sleep(2)
after = rss_kib()
print(f"{conns} idle WebSocket connections: RSS {before} -> {after} KiB, "
      f"{(after - before) / conns:.1f} KiB per connection")
per_conn["WS"] = (after - before) / conns
for s in held:
    s.close()

rundir = b.run_dir("tls")
b.keep(args, rundir, "tls.json", {
    "registers": regs, "connections": conns, "cpu_us_per_register": {k: round(v, 1) for k, v in results.items()},
    "kib_per_idle_connection": {k: round(v, 1) for k, v in per_conn.items()}, "machine": b.machine_info(argparse.Namespace(server="strowger", workers=None, sipp_rcvbuf=None,
                                                   bin=os.readlink(f"/proc/{pid}/exe")))})
b.summary(args, "SIP over TLS and WebSocket against UDP (bench/tls.sh)", "\n".join(
    ["| transport | CPU per REGISTER | ÷ UDP | RSS per idle connection |", "| --- | ---: | ---: | ---: |"]
    + [f"| {k} | {results[k]:.1f} µs | ×{results[k] / results['UDP']:.2f} | "
       + (f"{per_conn[k]:.1f} KiB |" if k in per_conn else "– |") for k in ("UDP", "TLS", "WS")]))
