"""bench/tls.sh's client: CPU per REGISTER over UDP, TLS and WebSocket (interleaved rounds), then
phones: N TLS connections that each register their own AOR and send a double-CRLF keep-alive
(RFC 5626 §3.5.1) every K seconds for a hold period — strowger's RSS per registered phone
connection and its CPU per phone while they only keep alive — then RSS per idle WebSocket
connection. The connections open non-blocking, a batch at a time, on one epoll selector. The
WebSocket side is written here from RFC 6455 (an upgrade request and masked text frames), so the
bench needs nothing beyond Python's standard library. The figures go to tls.json in a run
directory under bench/out/; --record also copies it to bench/results/ and appends the summary to
bench/RESULTS.md."""
import argparse, base64, errno, os, selectors, socket, ssl, statistics, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402

ap = argparse.ArgumentParser(description="bench/tls.sh's client: strowger's CPU per REGISTER over UDP, "
                                         "TLS and WebSocket, memory and keep-alive CPU per TLS phone, "
                                         "memory per idle WebSocket connection")
for name in ("pid", "host", "udp_port", "tls_port", "ca", "regs", "conns", "ws_port"):
    ap.add_argument(name, type=str if name in ("host", "ca") else int)
ap.add_argument("--rounds", type=int, default=5,
                help="REGISTERs go in this many rounds of UDP, TLS, WS (REGISTERS / ROUNDS each); "
                     "the ratios are the rounds' medians")
ap.add_argument("--keepalive", type=float, default=10, help="seconds between a phone's CRLF CRLF pings")
ap.add_argument("--hold", type=float, default=30, help="seconds the phones keep alive after registering")
ap.add_argument("--batch", type=int, default=200, help="TLS connections opening at once")
ap.add_argument("--ws-conns", type=int, default=1000,
                help="idle WebSocket connections (under sip.ws_max_connections, 1024 by default)")
b.add_record_flag(ap)
args = ap.parse_args()
pid, host, udp_port, tls_port, ca = args.pid, args.host, args.udp_port, args.tls_port, args.ca
regs, conns, ws_port = args.regs, args.conns, args.ws_port


def cpu_s():
    """strowger's CPU so far, in seconds: its threads' run time in nanoseconds (schedstat), not
    /proc/PID/stat's clock ticks, which are too coarse for a round of a few thousand REGISTERs."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except FileNotFoundError:
            pass  # a thread that just ended
    return total / 1e9


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


def phone_register(i, local):
    """Phone i's REGISTER of its own AOR, sip:phone{i}@host, its Contact on its connection."""
    return (f"REGISTER sip:{host} SIP/2.0\r\n"
            f"Via: SIP/2.0/TLS {local};branch=z9hG4bK-phone-{i}\r\n"
            f"Max-Forwards: 70\r\nFrom: <sip:phone{i}@{host}>;tag=p{i}\r\n"
            f"To: <sip:phone{i}@{host}>\r\nCall-ID: phone-{i}\r\n"
            f"CSeq: 1 REGISTER\r\nContact: <sip:phone{i}@{local};transport=tls>\r\n"
            f"Expires: 600\r\nContent-Length: 0\r\n\r\n").encode()


def tls_context():
    return ssl.create_default_context(cafile=ca)


def udp_client():
    """REGISTERs over one UDP socket: a function sending `n` from number `first`."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, udp_port))
    local = "%s:%d" % s.getsockname()

    def run(first, n):
        for i in range(first, first + n):
            s.send(register(i, "UDP", local))
            answer = s.recv(65535)
            assert b" 200 " in answer.split(b"\r\n", 1)[0], answer
    return run


def tls_client():
    """REGISTERs over one TLS connection, kept for every round (so one Contact per AOR)."""
    raw = socket.create_connection((host, tls_port))
    local = "%s:%d" % raw.getsockname()
    s = tls_context().wrap_socket(raw, server_hostname=host)
    buf = b""

    def run(first, n):
        nonlocal buf
        for i in range(first, first + n):
            s.sendall(register(i, "TLS", local))
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65535)
            head, buf = buf.split(b"\r\n\r\n", 1)
            assert b" 200 " in head.split(b"\r\n", 1)[0], head
    return run


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


def ws_client():
    """REGISTERs over one WebSocket, kept for every round."""
    s = ws_open()
    local = "%s:%d" % s.getsockname()
    buf = b""

    def run(first, n):
        nonlocal buf
        for i in range(first, first + n):
            s.sendall(ws_frame(register(i, "WS", local)))
            msg, buf = ws_read(s, buf)
            assert b" 200 " in msg.split(b"\r\n", 1)[0], msg
    return run


class Phone:
    """One TLS phone: connect, handshake, REGISTER, its 200; then pings and their pongs."""
    pongs = other = 0  # CRLFs and other bytes strowger sent all phones once registered

    def __init__(self, i, ctx, sel):
        self.i, self.ctx, self.sel, self.buf = i, ctx, sel, b""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        err = self.sock.connect_ex((host, tls_port))
        assert err in (0, errno.EINPROGRESS), os.strerror(err)
        self.state = "connect"
        sel.register(self.sock, selectors.EVENT_WRITE, self)

    def _want(self, events):
        self.sel.modify(self.sock, events, self)

    def step(self):
        """Advances on a ready event; returns "registered", "failed" or None (not yet)."""
        if self.state == "connect":
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return self._fail(f"connect: {os.strerror(err)}")
            self.local = "%s:%d" % self.sock.getsockname()
            self.sel.unregister(self.sock)
            self.sock = self.ctx.wrap_socket(self.sock, server_hostname=host, do_handshake_on_connect=False)
            self.sel.register(self.sock, selectors.EVENT_READ, self)
            self.state = "handshake"
        if self.state == "handshake":
            try:
                self.sock.do_handshake()
            except ssl.SSLWantReadError:
                return self._want(selectors.EVENT_READ)
            except ssl.SSLWantWriteError:
                return self._want(selectors.EVENT_WRITE)
            except (ssl.SSLError, OSError) as e:
                return self._fail(f"handshake: {e}")
            self.sock.send(phone_register(self.i, self.local))
            self.state = "register"
            return self._want(selectors.EVENT_READ)
        if self.state == "register":
            if not self._read():
                return self._fail("closed before its 200")
            if b"\r\n\r\n" not in self.buf:
                return None
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                return self._fail(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            self.state = "registered"
            return "registered"
        if self.state == "registered":
            if not self._read():
                self.state = "closed"
                self.sel.unregister(self.sock)
                return "closed"
            crlfs = self.buf.count(b"\r\n")
            Phone.pongs += crlfs
            Phone.other += len(self.buf) - 2 * crlfs
            self.buf = b""
        return None

    def _read(self):
        """Reads what is there into buf; False once the connection closed."""
        try:
            data = self.sock.recv(65535)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return True
        except (ssl.SSLError, OSError):
            return False
        self.buf += data
        return bool(data)

    def _fail(self, why):
        self.why, self.state = why, "failed"
        self.sel.unregister(self.sock)
        self.sock.close()
        return "failed"


def open_phones(n, batch):
    """n registered TLS phones, opened `batch` at a time on one selector; the failures' reasons."""
    sel, ctx = selectors.DefaultSelector(), tls_context()
    phones, failed, pending, started = [], [], 0, 0
    while started < n or pending:
        while started < n and pending < batch:
            phones.append(Phone(started, ctx, sel))
            started, pending = started + 1, pending + 1
        ready = sel.select(timeout=30)
        if not ready:
            raise SystemExit(f"{pending} TLS connections stalled for 30 s ({started} opened of {n})")
        for key, _ in ready:
            outcome = key.data.step()
            if outcome == "registered":
                pending -= 1
            elif outcome == "failed":
                pending -= 1
                failed.append(f"phone{key.data.i}: {key.data.why}")
    return sel, [p for p in phones if p.state == "registered"], failed


def keep_alive(sel, phones, every, hold):
    """Every phone sends CRLF CRLF each `every` seconds for `hold` seconds; counts the pings, the
    CRLF pongs back, anything else strowger sent and the connections it closed."""
    pings = 0
    end, next_ping = time.monotonic() + hold, time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_ping and now < end:
            for p in phones:
                if p.state == "registered":
                    p.sock.send(b"\r\n\r\n")
                    pings += 1
            next_ping += every
        if now >= end and Phone.pongs >= pings:
            break
        if now >= end + every:
            break  # pongs still missing a whole interval after the last ping: reported as missing
        for key, _ in sel.select(timeout=max(0.01, min(next_ping, end) - time.monotonic())):
            key.data.step()
    closed = sum(p.state != "registered" for p in phones)
    return pings, Phone.pongs, Phone.other, closed


# ---- CPU per REGISTER: rounds of UDP, TLS, WS, so drift in the machine's load hits all three alike
per_round = max(1, regs // args.rounds)
cpu = {"UDP": [], "TLS": [], "WS": []}
clients = (("UDP", udp_client()), ("TLS", tls_client()), ("WS", ws_client()))
for r in range(args.rounds):
    for name, run in clients:
        c0 = cpu_s()
        run(r * per_round, per_round)
        cpu[name].append((cpu_s() - c0) / per_round * 1e6)
    b.log(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f} µs" for k, v in cpu.items())
          + f" per REGISTER ({per_round} each)")
results = {k: statistics.median(v) for k, v in cpu.items()}
ratios = {k: statistics.median(x / u for x, u in zip(cpu[k], cpu["UDP"])) for k in ("TLS", "WS")}
print(f"TLS/UDP CPU per REGISTER: x{ratios['TLS']:.2f} (median of {args.rounds} rounds: "
      + ", ".join(f"x{x / u:.2f}" for x, u in zip(cpu["TLS"], cpu["UDP"])) + ")")
print(f"WS/UDP CPU per REGISTER: x{ratios['WS']:.2f}")

# ---- strowger idle, for what its own timers cost over the hold
time.sleep(1)
i0, it0 = cpu_s(), time.monotonic()
time.sleep(5)
idle_ms_per_s = (cpu_s() - i0) / (time.monotonic() - it0) * 1e3

# ---- phones: N TLS connections, each registered, then keeping alive
rss0 = rss_kib()
t0, c0 = time.monotonic(), cpu_s()
sel, phones, failed = open_phones(conns, args.batch)
t1, c1 = time.monotonic(), cpu_s()
b.log(f"{len(phones)} of {conns} TLS phones registered (200 OK each) in {t1 - t0:.1f} s, strowger CPU "
      f"{(c1 - c0) / conns * 1e6:.0f} µs per phone (handshake and REGISTER)")
for why in failed[:10]:
    b.log(f"failed: {why}")
time.sleep(2)
rss1 = rss_kib()
c2, h2 = cpu_s(), time.monotonic()
pings, pongs, other, closed = keep_alive(sel, phones, args.keepalive, args.hold)
c3, h3 = cpu_s(), time.monotonic()
hold_ms_per_s = (c3 - c2) / (h3 - h2) * 1e3
cpu_ping_us = (c3 - c2) / max(1, pings) * 1e6
rss2 = rss_kib()
kib_phone = (rss1 - rss0) / max(1, len(phones))
cpu_ka_us = (c3 - c2) / max(1, len(phones)) * 1e6
b.log(f"keep-alive {args.hold:.0f} s, a ping every {args.keepalive:.0f} s: {pings} pings, {pongs} CRLF pongs, "
      f"{other} other bytes, {closed} connections closed; strowger CPU {c3 - c2:.2f} s = {cpu_ka_us:.1f} µs "
      f"per phone over the hold, {cpu_ping_us:.1f} µs per ping; {hold_ms_per_s:.1f} ms CPU per second "
      f"against {idle_ms_per_s:.1f} idle before the phones")
b.log(f"RSS {rss0} -> {rss1} KiB registered ({kib_phone:.1f} KiB per phone), {rss2} KiB after the hold")

# ---- idle WebSocket connections (the phones stay open: memory they would free is not counted again)
time.sleep(1)
ws0 = rss_kib()
held = [ws_open() for _ in range(args.ws_conns)]
time.sleep(2)
ws1 = rss_kib()
kib_ws = (ws1 - ws0) / args.ws_conns
b.log(f"{args.ws_conns} idle WebSocket connections: RSS {ws0} -> {ws1} KiB, {kib_ws:.1f} KiB per connection")
for s in held:
    s.close()
for p in phones:
    p.sock.close()

rundir = b.run_dir("tls")
b.keep(args, rundir, "tls.json", {
    "registers": regs, "rounds": args.rounds,
    "cpu_us_per_register": {k: [round(x, 1) for x in v] for k, v in cpu.items()},
    "cpu_ratio_median": {k: round(v, 3) for k, v in ratios.items()},
    "phones": {"connections": conns, "registered": len(phones), "failed": failed[:100],
               "open_s": round(t1 - t0, 1), "cpu_us_per_phone_open": round((c1 - c0) / conns * 1e6, 1),
               "rss_kib": [rss0, rss1, rss2], "kib_per_phone": round(kib_phone, 2),
               "keepalive_s": args.keepalive, "hold_s": args.hold, "pings": pings, "pongs": pongs,
               "other_bytes": other, "closed": closed, "cpu_us_per_phone_hold": round(cpu_ka_us, 1),
               "cpu_us_per_ping": round(cpu_ping_us, 1), "cpu_ms_per_s_hold": round(hold_ms_per_s, 2),
               "cpu_ms_per_s_idle": round(idle_ms_per_s, 2)},
    "ws_idle": {"connections": args.ws_conns, "rss_kib": [ws0, ws1], "kib_per_connection": round(kib_ws, 2)},
    "machine": b.machine_info(argparse.Namespace(server="strowger", workers=None, sipp_rcvbuf=None,
                                                 bin=os.readlink(f"/proc/{pid}/exe")))})
b.summary(args, "SIP over TLS: phones with keep-alives, and CPU per REGISTER against UDP (bench/tls.sh)", "\n".join(
    ([f"Run by `{os.environ['TLS_SH_COMMAND']}`.", ""] if "TLS_SH_COMMAND" in os.environ else [])
    + ["| transport | CPU per REGISTER (median of rounds) | ÷ UDP (median of the rounds' ratios) |",
     "| --- | ---: | ---: |"]
    + [f"| {k} | {results[k]:.1f} µs | " + (f"×{ratios[k]:.2f} |" if k in ratios else "– |")
       for k in ("UDP", "TLS", "WS")]
    + ["", f"{len(phones)} of {conns} TLS phones registered (a 200 OK each, own AOR) in {t1 - t0:.1f} s, "
       f"{args.batch} opening at once; strowger CPU {(c1 - c0) / conns * 1e6:.0f} µs per phone to open and register.",
       f"RSS {rss0} → {rss1} KiB: **{kib_phone:.1f} KiB per registered phone connection** (target ≤ 64 KiB); "
       f"{rss2} KiB after the hold.",
       f"Keep-alive: CRLF CRLF every {args.keepalive:.0f} s for {args.hold:.0f} s: {pings} pings, {pongs} CRLF "
       f"pongs, {other} other bytes, {closed} connections closed; strowger CPU {c3 - c2:.2f} s = "
       f"**{cpu_ka_us:.1f} µs per phone** over the hold ({cpu_ping_us:.1f} µs per ping; "
       f"{hold_ms_per_s:.1f} ms of CPU per second against {idle_ms_per_s:.1f} idle before the phones).",
       f"{args.ws_conns} idle WebSocket connections (phones still open): {kib_ws:.1f} KiB per connection."]))
