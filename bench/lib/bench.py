#!/usr/bin/env python3
"""strowger load tests, measured the way ../shared/peers.md measured Asterisk, FreeSWITCH and Yate.

  a   Test A (the comparison paper's Test 1, scaled): N playback+echo calls held; server CPU over 30 s
      once all calls are up -> CPU %, CPU-ms per call-second; RSS per call; SIPp CPU; failed calls.
  b   Test B (Test 2, scaled): 20 calls/s up to 3000 held calls, at most 150 s; concurrent calls at the
      first SIP retransmission and at the first failed call; which process was saturated.
  c   Test C (signalling only): R calls/s for 30 s with no hold; CPU-ms per completed call; the
      highest rate with < 0.1 % failed calls.
  report   writes bench/results/latest.md (a RESULTS.md section) and the CPU-vs-calls plot.
  smoke    one call to extension 44444; exits 0 when it succeeds.

CPU is the process's run time as the kernel counts it, summed over its threads (/proc/PID/task/*/schedstat;
100 % = one core). Every run is bounded in calls and time, loopback only, SIPp always with -i 127.0.0.1; every child
runs in its own session (setsid, as peers.md asks, so its autogroup priority can be raised) and dies with
this script (PR_SET_PDEATHSIG, plus signal handlers that kill what we started, and nothing else).

Standard library only; the plot uses gnuplot (Debian package gnuplot-nox).
"""

import argparse
import ctypes
import datetime
import glob
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
RESULTS = os.path.join(BENCH, "results")
OUT = os.path.join(BENCH, "out")
HZ = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

# Figures from ../shared/peers.md (same machine class, same commands).
PEERS = [
    {
        "name": "FreeSWITCH 1.11.0",
        "a_ms": [2.54, 2.70],
        "a_rss": "127 MiB / 223 MiB (≈ 0.48 MiB per call)",
        "a_rss_per_call_kib": 0.48 * 1024,
        "b_retrans": 1425,
        "b_fail": 2700,
        "c_ms": 6.47,
        "c_clean": 200,
    },
    {
        "name": "Asterisk 22.10.1",
        "a_ms": [2.27, 2.18],
        "a_rss": "87 MB / 118 MB",
        "a_rss_per_call_kib": (118 - 87) * 1e6 / 200 / 1024,
        "b_retrans": 660,
        "b_fail": 1747,
        "c_ms": 1.65,
        "c_ms_text": "1.65–2.69",
        "c_rates": [100, 200, 400, 800],
        "c_clean": 800,
        "c_clean_text": "≥ 800",
    },
    {
        "name": "Yate 6.4.1",
        "a_ms": [3.74, 3.51],
        "a_rss": "15.6 MB / 24.3 MB (≈ 44 KB per call)",
        "a_rss_per_call_kib": 44e3 / 1024,
        "b_retrans": 542,
        "b_fail": 1641,
        "c_ms": 4.67,
        "c_clean": 100,
    },
]
FLOOR_MS = 0.20  # peers.md: the kernel's own UDP path for one playback+echo call-second

_children = []  # subprocess.Popen objects this script started; each leads its own session
_libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _child_setup():
    # Called in the child between fork and exec (start_new_session already did setsid):
    # die when this script dies, even by SIGKILL.
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(cmd, cwd, stdout, stderr):
    p = subprocess.Popen(
        cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
        start_new_session=True, preexec_fn=_child_setup,
    )
    _children.append(p)
    return p


def kill_children():
    for p in _children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    for p in _children:
        if p.poll() is None:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


def _on_signal(signum, _frame):
    log(f"signal {signum}: stopping the processes this run started")
    kill_children()
    sys.exit(128 + signum)


def raise_priority(pid):
    """peers.md: autogroup scheduling is on, so raise the autogroup priority (ignore failure)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write("-10")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- /proc readers

def proc_cpu(pid):
    """CPU seconds of the whole process: the kernel's exact run time of each live thread
    (/proc/PID/task/*/schedstat, nanoseconds). utime+stime is sampled at the 10 ms tick, which
    for a 2 s step at 1,000 operations/s is 5 us per operation, as coarse as the figure itself;
    it is the fallback where schedstat is missing. Only differences over a run are meaningful,
    and only while no thread exits."""
    total_ns, seen = 0, False
    for d in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(d + "/schedstat") as f:
                total_ns += int(f.read().split()[0])
                seen = True
        except (OSError, ValueError, IndexError):
            pass
    if seen:
        return total_ns / 1e9
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def session_pids(sid):
    """Every live process of session `sid` (Kamailio forks its workers into the session it was given)."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            out.append(int(os.path.basename(d)))
    return out


def session_cpu(sid):
    """CPU seconds (`proc_cpu`) of every live process of session `sid`."""
    total = 0.0
    for p in session_pids(sid):
        try:
            total += proc_cpu(p)
        except OSError:
            pass
    return total


def thread_cpu(pid):
    """{tid: (name, cpu seconds)} for every live thread."""
    out = {}
    for d in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(d + "/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[int(os.path.basename(d))] = (name, (int(fields[11]) + int(fields[12])) / HZ)
    return out


def proc_status(pid, key):
    """A kB field of /proc/PID/status (VmRSS, VmHWM, Threads) as an int."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def machine_cpu():
    """(busy, total, softirq) ticks over all cores from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    total = sum(v[:8])
    return total - idle, total, v[6]


def udp_snmp():
    with open("/proc/net/snmp") as f:
        lines = [ln.split() for ln in f if ln.startswith("Udp:")]
    return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:])}


def udp_socket_drops(ports):
    """Sum of the kernel's per-socket receive drops for 127.0.0.1 sockets bound to these ports."""
    total = 0
    with open("/proc/net/udp") as f:
        next(f)
        for ln in f:
            p = ln.split()
            port = int(p[1].split(":")[1], 16)
            if port in ports:
                total += int(p[-1])
    return total


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def busiest_others(exclude, seconds=2.0):
    """The processes (not ours) that used the most CPU over `seconds`: a check for a quiet machine."""
    def snap():
        out = {}
        for d in glob.glob("/proc/[0-9]*"):
            pid = int(os.path.basename(d))
            try:
                with open(d + "/stat") as f:
                    s = f.read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")]
            fields = s[s.rindex(")") + 2:].split()
            out[pid] = (name, (int(fields[11]) + int(fields[12])) / HZ)
        return out
    a = snap()
    time.sleep(seconds)
    b = snap()
    rows = []
    for pid, (name, c) in b.items():
        if pid in exclude or pid not in a:
            continue
        pct = (c - a[pid][1]) / seconds * 100
        if pct >= 5:
            rows.append({"pid": pid, "name": name, "cpu_pct": round(pct, 1)})
    return sorted(rows, key=lambda r: -r["cpu_pct"])[:5]


BUSY_OTHERS_PCT = 25  # other processes' CPU (% of one core) above which a figure is flagged busy


def quiet_fields(m0, m1, ours_s, span):
    """Whether a figure was taken on a quiet machine: `others_cpu_pct`, the CPU the machine spent
    over the window (`machine_cpu()` at either end, `span` s apart) less `ours_s` (the CPU seconds
    of the run's own processes), in % of one core, and `quiet`, False when that is over
    BUSY_OTHERS_PCT (with a warning line, so a figure from a shared machine is never passed off
    as a quiet one)."""
    others = max(0.0, (m1[0] - m0[0]) / HZ - ours_s) / span * 100
    f = {"others_cpu_pct": round(others, 1), "quiet": others <= BUSY_OTHERS_PCT}
    if not f["quiet"]:
        log(f"WARNING: other processes used {f['others_cpu_pct']} % of a core during this "
            f"{span:.1f} s window: the figure is flagged quiet: false (a quiet machine gives a "
            f"trustworthy one)")
    return f


def cpu_window(seconds, server_cpu, load_pids=()):
    """Sleeps `seconds` and returns the CPU of that window: the server's (`server_cpu()`, CPU
    seconds), the load generators' (`load_pids`), the whole machine's and everyone else's
    (`quiet_fields`)."""
    def snap():
        return (server_cpu(), sum(proc_cpu(p) for p in load_pids), machine_cpu(), time.time())
    c0, l0, m0, t0 = snap()
    time.sleep(seconds)
    c1, l1, m1, t1 = snap()
    span = t1 - t0
    w = {
        "window_s": round(span, 2), "server_cpu_s": c1 - c0,
        "server_cpu_pct": round((c1 - c0) / span * 100, 1),
        "load_cpu_pct": round((l1 - l0) / span * 100, 1),
        "machine_busy_pct": round(100 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1]), 1),
        **quiet_fields(m0, m1, (c1 - c0) + (l1 - l0), span),
    }
    return w


# ---------------------------------------------------------------- ports

_taken = set()


def _free(port):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def alloc_ports(n, align=2):
    """n consecutive free loopback ports (UDP and TCP), below the ephemeral range, first one even."""
    for _ in range(200):
        base = random.randrange(10000, 32700 - n) // align * align
        span = range(base, base + n)
        if any(p in _taken for p in span):
            continue
        if all(_free(p) for p in span):
            _taken.update(span)
            return base
    raise RuntimeError(f"no {n} consecutive free ports found on 127.0.0.1")


def release_ports(base, n):
    """Gives ports from alloc_ports back once what used them is gone, or bound what it needed (a bound port is
    not _free): a long run that takes ranges as it goes does not run out of them."""
    _taken.difference_update(range(base, base + n))


# ---------------------------------------------------------------- SIPp's echo socket buffer

RMEM = "/proc/sys/net/core/rmem_default"


def spawn_sipp_with_rcvbuf(rcvbuf, mp, start):
    """SIPp's -rtp_echo socket takes the kernel's default receive buffer (SIPp has no option for it).
    With --sipp-rcvbuf, raise net.core.rmem_default only while SIPp creates its sockets (until its echo
    port is bound, at most 3 s), then put the old value back."""
    if not rcvbuf:
        return start()
    with open(RMEM) as f:
        old = f.read().strip()
    try:
        with open(RMEM, "w") as f:
            f.write(str(rcvbuf))
        sipp = start()
        deadline = time.time() + 3
        while time.time() < deadline and _free(mp):
            time.sleep(0.02)
        time.sleep(0.1)
        return sipp
    finally:
        with open(RMEM, "w") as f:
            f.write(old)


# ---------------------------------------------------------------- processes

class Server:
    """strowger (or a SIPp UAS as a stand-in while strowger cannot answer calls yet)."""

    def __init__(self, args, rundir, tag, calls):
        self.kind = args.server
        _taken.clear()  # the processes of earlier tests are gone; their ports are free again
        self.dir = os.path.join(rundir, tag + "-server")
        os.makedirs(self.dir, exist_ok=True)
        self.port = alloc_ports(1, 1)
        # strowger takes an RTP+RTCP pair per call from its worker's slice of the range; leave headroom
        nports = max(2000, int(2.5 * calls) + 200)
        self.rtp_lo = alloc_ports(nports)
        self.rtp_hi = self.rtp_lo + nports - 1
        if self.kind == "strowger":
            cmd = [args.bin, "--config", args.config, "--sip-listen", f"127.0.0.1:{self.port}",
                   "--rtp-ports", f"{self.rtp_lo}-{self.rtp_hi}", "--data-dir", os.path.join(self.dir, "data")]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
        else:
            cmd = ["sipp", "-sn", "uas", "-i", "127.0.0.1", "-p", str(self.port), "-mp", str(media_port()),
                   "-nostdin", "-trace_screen"]
        self.cmd = cmd
        self.err_path = os.path.join(self.dir, "stderr.log")
        self.err = open(self.err_path, "w")
        self.p = spawn(cmd, self.dir, subprocess.DEVNULL, self.err)
        self.pid = self.p.pid
        self.banner = ""
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"server exited at start (code {self.p.returncode}): {self.stderr_tail()}")
            if self.kind == "strowger":
                for line in open(self.err_path, errors="replace"):
                    if "strowger " in line and "worker(s)" in line:
                        self.banner = line.strip()
                if self.banner:
                    break
            elif not _free(self.port):
                self.banner = "sipp -sn uas (stand-in server)"
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"server not ready after 30 s: {self.stderr_tail()}")
        self.prio = raise_priority(self.pid)

    def alive(self):
        return self.p.poll() is None

    def stderr_tail(self, n=1500):
        if not self.err.closed:
            self.err.flush()
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        """SIGTERM, then SIGKILL after 10 s. Returns what happened, for the results."""
        if self.p.poll() is not None:
            code, how = self.p.returncode, "had already exited"
        else:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                code, how = self.p.wait(10), "stopped on SIGTERM"
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                code, how = self.p.wait(), "did not stop within 10 s of SIGTERM; killed"
        self.err.close()
        tail = self.stderr_tail(4000)
        problems = [ln for ln in tail.splitlines()
                    if re.search(r"panick|fatal|overflow|SIGSEGV|error|capacity|cannot|refus", ln, re.I)]
        return {"exit": how, "code": code, "stderr_problems": problems[:10]}


class Sipp:
    """A SIPp client with its statistics (-trace_stat, one line a second) and message counts."""

    def __init__(self, rundir, tag, args_list, timeout_s):
        self.dir = os.path.join(rundir, tag)
        os.makedirs(self.dir, exist_ok=True)
        self.cmd = ["sipp"] + args_list
        full = self.cmd + ["-nostdin", "-trace_stat", "-stf", "stat.csv", "-fd", "1", "-trace_counts",
                           "-trace_screen", "-trace_err", "-max_log_size", "5000000",
                           "-timeout", f"{int(timeout_s)}s"]
        self.full_cmd = full
        self.err = open(os.path.join(self.dir, "stderr.log"), "w")
        self.t0 = time.time()
        self.p = spawn(full, self.dir, subprocess.DEVNULL, self.err)
        self.pid = self.p.pid
        self.prio = raise_priority(self.pid)
        self._hdr = {}

    def alive(self):
        return self.p.poll() is None

    def _last(self, pattern):
        files = glob.glob(os.path.join(self.dir, pattern))
        if not files:
            return {}
        with open(files[0], errors="replace") as f:
            lines = f.read().split("\n")
        if len(lines) < 3:  # header, at least one full line, and the trailing ""
            return {}
        hdr = lines[0].rstrip(";").split(";")
        vals = lines[-2].rstrip(";").split(";")
        return dict(zip(hdr, vals))

    def stat(self):
        """The last -trace_stat line: CurrentCall, TotalCallCreated, FailedCall(C), Retransmissions(C)..."""
        d = self._last("stat.csv")
        out = {}
        for k in ("CurrentCall", "TotalCallCreated", "SuccessfulCall(C)", "FailedCall(C)", "Retransmissions(C)",
                  "OutgoingCall(C)", "FailedMaxUDPRetrans(C)", "FailedUnexpectedMessage(C)",
                  "FailedCallRejected(C)", "FailedTimeoutOnRecv(C)", "DeadCallMsgs(C)", "OutOfCallMsgs(C)",
                  "Warnings(C)", "FatalErrors(C)", "WatchdogMajor(C)", "WatchdogMinor(C)"):
            try:
                out[k] = int(d[k])
            except (KeyError, ValueError):
                out[k] = 0
        out["ElapsedTime(C)"] = d.get("ElapsedTime(C)", "")
        out["ResponseTime1(C)"] = d.get("ResponseTime1(C)", "")
        return out

    def counts(self):
        """The last -trace_counts line: per scenario message counts (e.g. 5_ACK_Sent)."""
        out = {}
        for k, v in self._last("*_counts.csv").items():
            if k not in ("CurrentTime", "ElapsedTime"):
                try:
                    out[k] = int(v)
                except ValueError:
                    pass
        return out

    def acks(self):
        c = self.counts()
        for k, v in c.items():
            if k.endswith("_ACK_Sent"):
                return v
        return 0

    def byes(self):
        c = self.counts()
        for k, v in c.items():
            if k.endswith("_BYE_Sent"):
                return v
        return 0

    def failure_reasons(self):
        """What SIPp's -trace_err log says aborted calls: responses received (e.g. 503) and timeouts."""
        out = {}
        for path in glob.glob(os.path.join(self.dir, "*_errors.log")):
            with open(path, errors="replace") as f:
                text = f.read(20_000_000)
            for m in re.finditer(r"received 'SIP/2\.0 (\d{3})", text):
                k = "received " + m.group(1)
                out[k] = out.get(k, 0) + 1
            for m in re.finditer(r"(timeout|Timeout)[^\n]{0,40}", text):
                out["timeout"] = out.get("timeout", 0) + 1
        return out

    def wait(self, limit_s):
        try:
            return self.p.wait(limit_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            self.p.wait()
        self.err.close()


class CpuMeter:
    """CPU of a set of processes and of the machine between two points in time."""

    def __init__(self, pids):
        self.pids = pids
        self.reset()

    def _cpu(self, n):
        # The last value read stays valid after the process has exited and been reaped.
        try:
            self.last[n] = proc_cpu(self.pids[n])
        except (OSError, ValueError):
            pass
        return self.last.get(n, 0.0)

    def peek(self):
        for n in self.pids:
            self._cpu(n)

    def reset(self):
        self.t = time.time()
        if not hasattr(self, "last"):
            self.last = {}
        self.cpu = {n: self._cpu(n) for n in self.pids}
        self.threads = {n: thread_cpu(p) for n, p in self.pids.items()}
        self.machine = machine_cpu()

    def read(self, reset=True):
        t = time.time()
        dt = t - self.t
        out = {"seconds": dt}
        ours = 0.0
        for n, p in self.pids.items():
            c = self._cpu(n)
            th = thread_cpu(p)
            used = c - self.cpu[n]
            ours += used
            out[n + "_cpu_s"] = used
            out[n + "_pct"] = used / dt * 100
            busiest = []
            for tid, (name, tc) in th.items():
                before = self.threads[n].get(tid, (name, 0.0))[1]
                busiest.append((name, (tc - before) / dt * 100))
            busiest.sort(key=lambda x: -x[1])
            out[n + "_threads"] = [(name, round(pct, 1)) for name, pct in busiest[:4]]
        busy, total, softirq = machine_cpu()
        ncpu = os.cpu_count() or 1
        dbusy, dtotal = busy - self.machine[0], max(1, total - self.machine[1])
        out["machine_pct"] = dbusy / dtotal * 100 * ncpu
        out["softirq_pct"] = (softirq - self.machine[2]) / dtotal * 100 * ncpu
        out["others_pct"] = max(0.0, out["machine_pct"] - ours / dt * 100)
        if reset:
            self.reset()
        return out


# ---------------------------------------------------------------- helpers

def media_port():
    """A free SIPp media port: SIPp's -rtp_echo binds -mp and -mp+2 (video)."""
    return alloc_ports(4)


def sipp_version():
    try:
        out = subprocess.run(["sipp", "-v"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"SIPp v[^\s,]+", out)
        return m.group(0) if m else out.strip()[:60]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--",
                                "crates", "Cargo.lock", "Cargo.toml"], capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted-changes" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def machine_info(args):
    model = cpu_model()
    mhz = ""
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("cpu MHz"):
                mhz = ln.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    flags = open("/proc/cpuinfo").read()
    try:
        autogroup = open("/proc/sys/kernel/sched_autogroup_enabled").read().strip()
    except OSError:
        autogroup = "?"
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "cpu_mhz": mhz,
        "avx512": "avx512f" in flags,
        "mem_mib": mem,
        "kernel": os.uname().release,
        "sched_autogroup_enabled": autogroup,
        "sipp": sipp_version(),
        "server": args.server,
        "strowger_rev": git_rev(),
        "workers": args.workers or "default (one per core)",
        "sipp_echo_rcvbuf": args.sipp_rcvbuf or f"kernel default ({open(RMEM).read().strip()} bytes)",
        "loadavg_at_start": loadavg(),
    }
    if args.server == "strowger":
        try:
            st = os.stat(args.bin)
            info["strowger_binary_built"] = datetime.datetime.fromtimestamp(
                st.st_mtime, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            import hashlib
            with open(args.bin, "rb") as f:
                info["strowger_binary_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            pass
        try:
            info["strowger_version"] = subprocess.run([args.bin, "--version"], capture_output=True, text=True,
                                                      timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            pass
    return info


def make_config(args, rundir):
    """The embedded default configuration logging at info (the start-up line and admission changes,
    nothing per call), the call cap lifted (Test B needs more than the default 1000 calls) and SIPp on
    127.0.0.1 trusted (its calls run in the default context unchallenged, as before calls were authenticated)."""
    if args.server != "strowger":
        return None
    text = subprocess.run([args.bin, "default-config"], capture_output=True, text=True, timeout=10, check=True).stdout
    new, n1 = re.subn(r"(?m)^max_calls\s*=.*$", "max_calls = 100000", text)
    new, n2 = re.subn(r"(?m)^log_level\s*=.*$", 'log_level = "info"', new)
    new, n3 = re.subn(r"(?m)^trusted\s*=.*$", 'trusted = ["127.0.0.1"]', new)
    if n1 != 1 or n2 != 1 or n3 != 1:
        log(f"warning: could not set max_calls ({n1}) / log_level ({n2}) / trusted ({n3}) in the default configuration")
    path = os.path.join(rundir, "strowger-bench.toml")
    with open(path, "w") as f:
        f.write(new)
    return path


def cdr_summary(srv):
    """strowger's own per-call RTP counters from its CDRs (SIPp does not report RTP counts)."""
    path = os.path.join(srv.dir, "data", "cdr.jsonl")
    if not os.path.exists(path):
        return None
    out = {"records": 0, "packets_sent": 0, "packets_received": 0, "packets_lost": 0, "jitter_ms_max": 0.0,
           "causes": {}, "hangup_side": {}}
    with open(path, errors="replace") as f:
        for ln in f:
            try:
                r = json.loads(ln)
            except ValueError:
                continue
            out["records"] += 1
            for k in ("packets_sent", "packets_received", "packets_lost"):
                out[k] += int(r.get(k) or 0)
            out["jitter_ms_max"] = max(out["jitter_ms_max"], float(r.get("jitter_ms") or 0))
            c = str(r.get("cause_text", r.get("cause")))
            out["causes"][c] = out["causes"].get(c, 0) + 1
            h = str(r.get("hangup_side"))
            out["hangup_side"][h] = out["hangup_side"].get(h, 0) + 1
    return out


def median_run(runs, key):
    """Of runs repeated under the same load, the one whose `key` is the median (the lower of the
    two middle ones for an even count; runs without a figure count last), with every run's
    figure in `rounds_us`, in the order they ran."""
    figures = [r[key] for r in runs]
    ranked = sorted(runs, key=lambda r: (r[key] is None, r[key] or 0))
    valid = [r for r in ranked if r[key] is not None]
    pick = valid[(len(valid) - 1) // 2] if valid else ranked[0]
    return {**pick, "rounds_us": figures}


def paired(ours, theirs):
    """Ratios ours ÷ theirs of two series measured in turns, round by round (a round without a
    figure on either side gives none; it is not hidden: `ratios` is shorter), and their median,
    min and max."""
    ratios = [round(a / t, 3) for a, t in zip(ours, theirs) if a and t]
    if not ratios:
        return {"ratios": [], "median": None, "min": None, "max": None}
    return {"ratios": ratios, "median": round(statistics.median(ratios), 3), "min": min(ratios),
            "max": max(ratios)}


def _load3():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# When the run began and how loaded the machine was then: bench.py is imported as a script starts.
STARTED = (datetime.datetime.now(datetime.timezone.utc), _load3())
RESULTS_MD = os.path.join(BENCH, "RESULTS.md")


def add_record_flag(ap):
    """--record: the run's summary goes to the end of bench/RESULTS.md too ([`summary`]), and its
    result files to bench/results/ ([`keep`])."""
    ap.add_argument("--record", action="store_true", default=os.environ.get("RECORD") == "1",
                    help="append this run's summary, with its command, date, commit and machine, to "
                         "bench/RESULTS.md and copy its result files from bench/out/ to bench/results/ "
                         "(RECORD=1 in the environment does the same)")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    return "unknown CPU"


def record_section(title, text, command, started, ended, rev, nproc, model, load_start, load_end):
    """A run's section of RESULTS.md, the one format every script records in: title and date,
    the exact command, the commit, the machine and its load at the start and end, the summary."""
    return (f"\n## {started:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC — {title}\n\n"
            f"Command: `{command}`. Commit: `{rev}`. Machine: {nproc} × {model}; load average (1, 5, 15 min) "
            f"{load_start} at the start, {load_end} at the end (above {nproc}, other processes shared the "
            f"cores and CPU figures are less sure). Recorded with `--record`.\n\n{text.strip()}\n")


def summary(args, title, text):
    """Prints a run's summary (markdown) and, with --record or RECORD=1, appends it to
    bench/RESULTS.md as a section in the shared format (`record_section`)."""
    print(text)
    if not getattr(args, "record", False):
        return
    command = shlex.join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:])
    started, load_start = STARTED
    with open("/proc/cpuinfo") as f:
        vm = " (a virtual machine)" if " hypervisor" in f.read() else ""
    section = record_section(title, text, command, started, datetime.datetime.now(datetime.timezone.utc),
                             git_rev(), os.cpu_count(), cpu_model() + vm, load_start, _load3())
    with open(RESULTS_MD, "a") as f:
        f.write(section)
    log(f"recorded in {os.path.relpath(RESULTS_MD, ROOT)}")


def run_dir(name):
    """A new run directory bench/out/NAME-TIME, said in the log."""
    rundir = os.path.join(OUT, name + "-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(rundir, exist_ok=True)
    log(f"run directory {os.path.relpath(rundir, ROOT)}")
    return rundir


def keep(args, rundir, name, data=None):
    """A result file of the run: `data` (when given) written as JSON to NAME in the run directory
    (bench/out/..., untracked), and with --record also copied to bench/results/NAME, where the
    figures RESULTS.md cites live (bench/results/ is ignored by git: `git add -f` a file a section
    cites). Returns the run directory's copy."""
    path = os.path.join(rundir, name)
    if data is not None:
        with open(path, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
    if getattr(args, "record", False):
        os.makedirs(RESULTS, exist_ok=True)
        shutil.copy(path, os.path.join(RESULTS, name))
        log(f"results: {os.path.relpath(path, ROOT)}, recorded as {os.path.relpath(os.path.join(RESULTS, name), ROOT)}")
    else:
        log(f"results: {os.path.relpath(path, ROOT)} (--record also keeps it in bench/results/)")
    return path


def write_rows(args, rundir, name, info, rows):
    """Writes {"info", "rows"} to NAME in the run directory, and with --record to bench/results/ too
    ([`keep`]); returns the run directory's copy."""
    return keep(args, rundir, name, {"info": info, "rows": rows})


def metrics_lines(url, token=None):
    """The lines of a Prometheus text page (strowger's /metrics with its bearer `token`, or another's)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode().splitlines()


def fmt_cmd(cmd):
    return shlex.join(cmd)


def load_results():
    path = os.path.join(RESULTS, "latest.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {}


def save_results(section, data, info):
    section = section + (f"-{TAG[0]}" if TAG[0] else "")
    os.makedirs(RESULTS, exist_ok=True)
    res = load_results()
    res.setdefault("machine", {})
    res["machine"].update(info)
    res[section] = data
    res[section]["machine"] = info
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    log(f"results: {os.path.relpath(os.path.join(RESULTS, 'latest.json'), ROOT)} [{section}]")


TAG = [""]  # --tag: results go to section "A-TAG" instead of "A" (e.g. a supplementary run)
QUIET_WAIT = [int(os.environ.get("QUIET_WAIT", "60"))]  # s to wait for a quieter machine before a figure (env QUIET_WAIT)


def quiet_check(exclude):
    """Note the busiest other processes; wait (bounded) while they use more than a quarter of a
    core. Going on regardless, the figures then taken say so themselves (`quiet_fields`)."""
    deadline = time.time() + QUIET_WAIT[0]
    others = busiest_others(exclude)
    while sum(o["cpu_pct"] for o in others) > 25 and time.time() < deadline:
        log("waiting for a quieter machine (up to %.0f s more): " % (deadline - time.time())
            + ", ".join(f"{o['name']}({o['pid']}) {o['cpu_pct']} %" for o in others))
        time.sleep(3)
        others = busiest_others(exclude)
    if others:
        log("other busy processes: " + ", ".join(f"{o['name']}({o['pid']}) {o['cpu_pct']} %" for o in others))
    else:
        log(f"machine quiet (load average {loadavg()})")
    return others


# ---------------------------------------------------------------- Test A

def test_a(args, rundir):
    levels = []
    for n in args.levels:
        ramp = n / args.rate
        hold_ms = max(args.min_hold * 1000, int((ramp + args.all_up) * 1000))  # all calls up together for >= all_up s
        log(f"A[{n}]: {n} calls at {args.rate}/s (ramp {ramp:.0f} s), each held {hold_ms / 1000:.0f} s; "
            f"measure {args.window} s once all are up; about {ramp + hold_ms / 1000 + 15:.0f} s in all")
        srv = Server(args, rundir, f"A{n}", n)
        others = quiet_check({os.getpid(), srv.pid})
        time.sleep(1)
        idle = CpuMeter({"server": srv.pid})
        time.sleep(2)
        idle_cpu = idle.read()
        rss_idle = proc_status(srv.pid, "VmRSS")
        mp = media_port()
        sp = alloc_ports(1, 1)
        sargs = ["-sn", "uac", "-rtp_echo", "-d", str(hold_ms), "-s", "44444", f"127.0.0.1:{srv.port}",
                 "-i", "127.0.0.1", "-p", str(sp), "-l", str(n), "-m", str(n), "-r", str(args.rate), "-mp", str(mp)]
        sipp = spawn_sipp_with_rcvbuf(args.sipp_rcvbuf, mp,
                                      lambda: Sipp(rundir, f"A{n}-sipp", sargs, ramp + hold_ms / 1000 + 60))
        t_start = time.time()
        deadline = t_start + ramp + 30
        next_note = t_start + 5
        up = 0
        while time.time() < deadline and sipp.alive() and srv.alive():
            up = sipp.acks()
            st = sipp.stat()
            if up >= n or up + st["FailedCall(C)"] >= n:
                break
            if time.time() >= next_note:
                log(f"A[{n}]: ramp {up}/{n} calls up, failed {st['FailedCall(C)']}, "
                    f"{time.time() - t_start:.0f} s")
                next_note += 5
            time.sleep(0.5)
        t_up = time.time() - t_start
        st = sipp.stat()
        log(f"A[{n}]: {up}/{n} calls up after {t_up:.1f} s (failed so far {st['FailedCall(C)']}); "
            f"settling {args.settle} s, then measuring {args.window} s")
        time.sleep(args.settle)
        ports = {mp}
        meter = CpuMeter({"server": srv.pid, "sipp": sipp.pid})
        snmp0, drops0 = udp_snmp(), udp_socket_drops(ports)
        rss, calls_seen, per_sec = [], [], []
        sec = CpuMeter({"server": srv.pid})
        t_w = time.time()
        while time.time() - t_w < args.window and srv.alive() and sipp.alive():
            time.sleep(1)
            rss.append(proc_status(srv.pid, "VmRSS"))
            calls_seen.append(sipp.acks() - sipp.byes())
            per_sec.append(round(sec.read()["server_pct"], 1))
            if len(rss) % 10 == 0:
                log(f"A[{n}]: measuring, {len(rss)}/{args.window} s, server {per_sec[-1]} % this second")
        win = meter.read()
        snmp1, drops1 = udp_snmp(), udp_socket_drops(ports)
        threads = proc_status(srv.pid, "Threads") if srv.alive() else 0
        fds = fd_count(srv.pid)
        calls = sum(calls_seen) / max(1, len(calls_seen))
        dt = win["seconds"]
        dgrams = (snmp1["OutDatagrams"] - snmp0["OutDatagrams"]) / dt
        rest = hold_ms / 1000 - (time.time() - t_start) + ramp + 5
        log(f"A[{n}]: server {win['server_pct']:.1f} % = {win['server_cpu_s'] * 1000 / dt / max(1, calls):.3f} "
            f"ms per call-second; RSS {max(rss) / 1024 if rss else 0:.1f} MiB; SIPp {win['sipp_pct']:.1f} %; "
            f"waiting ≈ {max(0, rest):.0f} s for the calls to end")
        code = sipp.wait(max(10, rest + 60))
        if code is None:
            log(f"A[{n}]: SIPp still running past its time; killing it")
            sipp.kill()
        final = sipp.stat()
        rss_after = proc_status(srv.pid, "VmRSS") if srv.alive() else 0
        stop = srv.stop()
        sipp.err.close()
        cdr = cdr_summary(srv)
        lvl = {
            "calls": n,
            "calls_up": up,
            "calls_measured": round(calls, 1),
            "ramp_s": round(t_up, 1),
            "hold_ms": hold_ms,
            "window_s": round(dt, 1),
            "server_cpu_pct": round(win["server_pct"], 2),
            "server_cpu_pct_per_second": per_sec,
            "ms_per_call_second": round(win["server_cpu_s"] * 1000 / dt / max(1, calls), 4),
            "server_threads": threads,
            "server_busiest_threads": win["server_threads"],
            "server_fds": fds,
            "server_idle_cpu_pct": round(idle_cpu["server_pct"], 2),
            "rss_idle_kib": rss_idle,
            "rss_loaded_kib": max(rss) if rss else 0,
            "rss_per_call_kib": round((max(rss) - rss_idle) / max(1, calls), 2) if rss else None,
            "rss_after_calls_kib": rss_after,
            "sipp_cpu_pct": round(win["sipp_pct"], 2),
            "sipp_busiest_threads": win["sipp_threads"],
            "machine_cpu_pct": round(win["machine_pct"], 1),
            "softirq_pct": round(win["softirq_pct"], 1),
            "others_cpu_pct": round(win["others_pct"], 1),
            "others_at_start": others,
            "udp_datagrams_per_s": round(dgrams),
            "udp_datagrams_per_call_s": round(dgrams / max(1, calls), 1),
            "udp_rcvbuf_errors": snmp1["RcvbufErrors"] - snmp0["RcvbufErrors"],
            "udp_in_errors": snmp1["InErrors"] - snmp0["InErrors"],
            "sipp_echo_socket_drops": drops1 - drops0,
            "successful": final["SuccessfulCall(C)"],
            "failed": final["FailedCall(C)"],
            "retransmissions": final["Retransmissions(C)"],
            "sipp_exit": code,
            "sipp_final": final,
            "server_cdr": cdr,
            "server_stop": stop,
            "server_cmd": fmt_cmd(srv.cmd),
            "sipp_cmd": fmt_cmd(sipp.cmd),
            "autogroup_raised": srv.prio and sipp.prio,
            "dir": os.path.relpath(sipp.dir, ROOT),
        }
        log(f"A[{n}]: done: {lvl['successful']} successful, {lvl['failed']} failed, "
            f"{lvl['retransmissions']} retransmissions; server {stop['exit']}")
        levels.append(lvl)
    return {"levels": levels, "rate": args.rate, "window_s": args.window}


# ---------------------------------------------------------------- Test B

def test_b(args, rundir):
    n, limit = args.b_calls, args.b_seconds
    log(f"B: {n} calls at {args.rate}/s, each held 600 s, stopped after {limit} s at most "
        f"(or {args.b_after_fail} s after the first failed call)")
    srv = Server(args, rundir, "B", n)
    others = quiet_check({os.getpid(), srv.pid})
    time.sleep(1)
    rss_idle = proc_status(srv.pid, "VmRSS")
    mp = media_port()
    sp = alloc_ports(1, 1)
    sargs = ["-sn", "uac", "-rtp_echo", "-d", "600000", "-s", "44444", f"127.0.0.1:{srv.port}",
             "-i", "127.0.0.1", "-p", str(sp), "-l", str(n), "-m", str(n), "-r", str(args.rate), "-mp", str(mp)]
    sipp = spawn_sipp_with_rcvbuf(args.sipp_rcvbuf, mp, lambda: Sipp(rundir, "B-sipp", sargs, limit + 20))
    meter = CpuMeter({"server": srv.pid, "sipp": sipp.pid})
    snmp0 = udp_snmp()
    t0 = time.time()
    series = []
    first_retrans = first_fail = None
    stop_at = t0 + limit
    next_note = t0 + 10
    why = f"{limit} s limit"
    while time.time() < stop_at:
        time.sleep(1)
        if not srv.alive():
            why = f"the server ({srv.kind}) exited (code {srv.p.returncode})"
            break
        if not sipp.alive():
            why = f"SIPp exited (code {sipp.p.returncode})"
            break
        st = sipp.stat()
        w = meter.read()
        snmp = udp_snmp()
        row = {
            "t": round(time.time() - t0, 1),
            "calls": st["CurrentCall"],
            "created": st["TotalCallCreated"],
            "up": sipp.acks() - sipp.byes(),
            "retrans": st["Retransmissions(C)"],
            "failed": st["FailedCall(C)"],
            "server_pct": round(w["server_pct"], 1),
            "server_top_thread_pct": w["server_threads"][0][1] if w["server_threads"] else 0,
            "sipp_pct": round(w["sipp_pct"], 1),
            "sipp_threads": w["sipp_threads"],
            "machine_pct": round(w["machine_pct"], 1),
            "others_pct": round(w["others_pct"], 1),
            "rss_kib": proc_status(srv.pid, "VmRSS"),
            "rcvbuf_errors": snmp["RcvbufErrors"] - snmp0["RcvbufErrors"],
            "sipp_echo_drops": udp_socket_drops({mp}),
        }
        series.append(row)
        if first_retrans is None and row["retrans"] > 0:
            first_retrans = len(series) - 1
            log(f"B: first retransmission at {row['calls']} calls ({row['t']:.0f} s)")
        if first_fail is None and row["failed"] > 0:
            first_fail = len(series) - 1
            log(f"B: first failed call at {row['calls']} calls ({row['t']:.0f} s)")
            stop_at = min(stop_at, time.time() + args.b_after_fail)
            why = f"{args.b_after_fail} s after the first failed call"
        if time.time() >= next_note:
            log(f"B: {row['t']:.0f}/{limit} s: {row['calls']} calls ({row['up']} up), server {row['server_pct']} %, "
                f"SIPp {row['sipp_pct']} %, machine {row['machine_pct']} %, retrans {row['retrans']}, "
                f"failed {row['failed']}")
            next_note += 10
    peak_rss = proc_status(srv.pid, "VmRSS") if srv.alive() else 0
    threads = proc_status(srv.pid, "Threads") if srv.alive() else 0
    log(f"B: stopping ({why})")
    sipp.kill()
    final = sipp.stat()
    stop = srv.stop()
    cdr = cdr_summary(srv)

    def verdict(i):
        if i is None:
            return None
        rows = series[max(0, i - 4):i + 1]
        avg = lambda k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
        srv_pct, srv_top = avg("server_pct"), avg("server_top_thread_pct")
        sipp_pct, mach = avg("sipp_pct"), avg("machine_pct")
        sipp_top = max((t[1] for r in rows for t in r["sipp_threads"][:1]), default=0)
        ncpu = os.cpu_count() or 1
        workers = args.workers or ncpu
        sat = []
        if sipp_top >= 90:
            sat.append(f"SIPp (its busiest thread at {sipp_top:.0f} % of a core)")
        if srv_top >= 90 or srv_pct >= 90 * min(workers, ncpu):
            sat.append(f"strowger ({srv_pct:.0f} %, busiest thread {srv_top:.0f} %)")
        if mach >= 0.9 * 100 * ncpu:
            sat.append(f"the machine ({mach:.0f} % of {ncpu * 100} %)")
        return {
            "calls": series[i]["calls"], "up": series[i]["up"], "t": series[i]["t"],
            "server_pct_5s": round(srv_pct, 1), "server_top_thread_pct_5s": round(srv_top, 1),
            "sipp_pct_5s": round(sipp_pct, 1), "sipp_top_thread_pct_5s": round(sipp_top, 1),
            "machine_pct_5s": round(mach, 1),
            "saturated": "; ".join(sat) if sat else "none near 100 % of a core",
        }

    last = series[-1] if series else {}
    res = {
        "calls_target": n,
        "rate": args.rate,
        "seconds_limit": limit,
        "stopped": why,
        "first_retransmission": verdict(first_retrans),
        "first_failure": verdict(first_fail),
        "max_calls": max((r["calls"] for r in series), default=0),
        "max_up": max((r["up"] for r in series), default=0),
        "final": final,
        "failure_reasons": sipp.failure_reasons(),
        "last_sample": last,
        "rss_idle_kib": rss_idle,
        "rss_peak_kib": peak_rss,
        "server_threads": threads,
        "server_stop": stop,
        "server_cdr": cdr,
        "server_cmd": fmt_cmd(srv.cmd),
        "sipp_cmd": fmt_cmd(sipp.cmd),
        "others_at_start": others,
        "series": series,
        "dir": os.path.relpath(sipp.dir, ROOT),
    }
    fr, ff = res["first_retransmission"], res["first_failure"]
    log(f"B: first retransmission: {fr['calls'] if fr else 'none'}; first failure: {ff['calls'] if ff else 'none'}; "
        f"max {res['max_calls']} calls; server {stop['exit']}")
    return res


# ---------------------------------------------------------------- Test C

def test_c(args, rundir):
    rows = []
    for r in args.rates:
        m = args.c_seconds * r
        log(f"C[{r}/s]: {m} calls, no hold, about {args.c_seconds} s")
        srv = Server(args, rundir, f"C{r}", max(1000, r))  # RTP range: room for a second's calls in flight
        others = quiet_check({os.getpid(), srv.pid})
        time.sleep(1)
        idle = CpuMeter({"server": srv.pid})
        time.sleep(2)
        idle_pct = idle.read()["server_pct"]
        sp = alloc_ports(1, 1)
        mp = media_port()
        sargs = ["-sn", "uac", "-d", "0", "-s", "44444", f"127.0.0.1:{srv.port}", "-i", "127.0.0.1",
                 "-p", str(sp), "-r", str(r), "-m", str(m), "-mp", str(mp)]
        sipp = Sipp(rundir, f"C{r}-sipp", sargs, args.c_seconds * 3 + 40)
        meter = CpuMeter({"server": srv.pid, "sipp": sipp.pid})
        t0 = time.time()
        next_note = t0 + 10
        code = None
        while time.time() - t0 < args.c_seconds * 3 + 45:
            meter.peek()
            code = sipp.p.poll()
            if code is not None:
                break
            if not srv.alive():
                break
            time.sleep(0.25)
            if time.time() >= next_note:
                st = sipp.stat()
                log(f"C[{r}/s]: {time.time() - t0:.0f} s, {st['SuccessfulCall(C)']} done, "
                    f"{st['FailedCall(C)']} failed, {st['CurrentCall']} in progress")
                next_note += 10
        wall = time.time() - t0
        w = meter.read()
        if sipp.alive():
            log(f"C[{r}/s]: SIPp still running after {wall:.0f} s; killing it")
            sipp.kill()
            code = None
        else:
            sipp.err.close()
        st = sipp.stat()
        stop = srv.stop()
        cdr = cdr_summary(srv)
        ok, failed = st["SuccessfulCall(C)"], st["FailedCall(C)"]
        attempted = ok + failed
        row = {
            "rate": r,
            "calls": m,
            "successful": ok,
            "failed": failed,
            "failed_pct": round(failed / attempted * 100, 3) if attempted else None,
            "retransmissions": st["Retransmissions(C)"],
            "wall_s": round(wall, 1),
            "achieved_rate": round(attempted / wall, 1) if wall else 0,
            "server_cpu_s": round(w["server_cpu_s"], 3),
            "server_cpu_pct": round(w["server_pct"], 1),
            "server_idle_cpu_pct": round(idle_pct, 2),
            "ms_per_call": round(w["server_cpu_s"] * 1000 / ok, 4) if ok else None,
            "sipp_cpu_pct": round(w["sipp_pct"], 1),
            "sipp_busiest_threads": w["sipp_threads"],
            "server_busiest_threads": w["server_threads"],
            "machine_cpu_pct": round(w["machine_pct"], 1),
            "others_cpu_pct": round(w["others_pct"], 1),
            "others_at_start": others,
            "sipp_exit": code,
            "sipp_final": st,
            "server_cdr": cdr,
            "server_stop": stop,
            "server_cmd": fmt_cmd(srv.cmd),
            "sipp_cmd": fmt_cmd(sipp.cmd),
            "dir": os.path.relpath(sipp.dir, ROOT),
        }
        row["clean"] = bool(attempted >= m and failed / attempted < 0.001)
        rows.append(row)
        log(f"C[{r}/s]: {ok} done, {failed} failed ({row['failed_pct']} %), {row['ms_per_call']} CPU-ms per call, "
            f"server {row['server_cpu_pct']} %, SIPp {row['sipp_cpu_pct']} %, {row['achieved_rate']} calls/s achieved")
        if not row["clean"] and not args.c_all:
            log(f"C: {r}/s is not clean; stopping the rate sweep here")
            break
    clean = [x["rate"] for x in rows if x["clean"]]
    return {"rates": rows, "highest_clean_rate": max(clean) if clean else None, "seconds": args.c_seconds}


# ---------------------------------------------------------------- smoke

def smoke(args, rundir):
    srv = Server(args, rundir, "smoke", 10)
    sp = alloc_ports(1, 1)
    mp = media_port()
    sipp = Sipp(rundir, "smoke-sipp", ["-sn", "uac", "-d", "1000", "-s", "44444", f"127.0.0.1:{srv.port}",
                                       "-i", "127.0.0.1", "-p", str(sp), "-m", "1", "-mp", str(mp)], 20)
    code = sipp.wait(30)
    st = sipp.stat()
    stop = srv.stop()
    ok = code == 0 and st["SuccessfulCall(C)"] == 1
    log(f"smoke: {srv.banner}; SIPp exit {code}, {st['SuccessfulCall(C)']} successful, "
        f"{st['FailedCall(C)']} failed; server {stop['exit']} -> {'OK' if ok else 'FAILED'}")
    return ok


# ---------------------------------------------------------------- report

def fnum(x, nd=2):
    if x is None:
        return "–"
    if isinstance(x, (int,)) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x):,}"
    return f"{x:.{nd}f}"


def ratio(peer, ours, higher_is_better=False):
    if not peer or not ours:
        return ""
    r = ours / peer if higher_is_better else peer / ours
    return f" (×{r:.1f})" if r >= 1.95 else f" (×{r:.2f})"


def plot(res):
    """strowger CPU % against concurrent calls (Test A levels, Test B ramp), with the peers' slopes."""
    if not shutil.which("gnuplot"):
        log("gnuplot not found (Debian package gnuplot-nox): no plot")
        return []
    # Test A levels, from the main run and any supplementary ones (A-TAG) at other levels
    a = sorted((lv for k in res if k == "A" or k.startswith("A-") for lv in res[k].get("levels", [])),
               key=lambda lv: lv["calls"])
    b = res.get("B", {}).get("series", [])
    if not a and not b:
        return []
    d = os.path.join(OUT, "plot")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "a.dat"), "w") as f:
        for lv in a:
            f.write(f"{lv['calls_measured']} {lv['server_cpu_pct']} {lv['sipp_cpu_pct']}\n")
    with open(os.path.join(d, "b.dat"), "w") as f:
        # 5-second moving average of the ramp: the 1-s CPU samples are quantised to 1 % (100 Hz ticks)
        for i in range(len(b)):
            rows = b[max(0, i - 4):i + 1]
            f.write(f"{b[i]['up']} {sum(r['server_pct'] for r in rows) / len(rows):.2f} "
                    f"{sum(r['sipp_pct'] for r in rows) / len(rows):.2f}\n")
    xmax = max([lv["calls"] for lv in a] + [r["up"] for r in b] + [400]) * 1.08
    ncpu = os.cpu_count() or 1
    ymax = 100 * ncpu * 1.1
    rev = res.get("machine", {}).get("strowger_rev", "")
    slope = None
    if a:
        # least-squares slope through the origin, % per call
        sxy = sum(lv["calls_measured"] * lv["server_cpu_pct"] for lv in a)
        sxx = sum(lv["calls_measured"] ** 2 for lv in a)
        slope = sxy / sxx if sxx else None
    lines = []
    for p, dash, color in zip(PEERS, (2, 3, 4), ("#8e44ad", "#e67e22", "#7f8c8d")):
        ms = p["a_ms"][0]
        lines.append(f"{ms / 10} * x with lines dt {dash} lw 2 lc rgb '{color}' "
                     f"title '{p['name']} (peers.md, 200 calls): {ms} ms per call-second'")
    lines.append(f"{FLOOR_MS / 10} * x with lines dt 1 lw 1 lc rgb '#999999' title 'kernel UDP floor (peers.md): "
                 f"{FLOOR_MS} ms per call-second'")
    if b:
        lines.append("'b.dat' using 1:2 with lines lw 1.5 lc rgb '#2e86c1' title 'strowger, Test B ramp at 20 calls/s (5 s mean)'")
    if b:
        lines.append("'b.dat' using 1:3 with lines lw 1 dt 2 lc rgb '#c0504d' title 'SIPp (load generator), Test B ramp'")
    if slope:
        lines.append(f"{slope} * x with lines lw 1 lc rgb '#1f4e79' notitle")
    if a:
        lines.append(f"'a.dat' using 1:2 with linespoints pt 7 ps 1.6 lw 2 lc rgb '#1f4e79' title "
                     f"'strowger, Test A: {slope * 10:.2f} ms per call-second'")
        lines.append("'a.dat' using 1:3 with points pt 6 ps 1.4 lc rgb '#c0504d' title 'SIPp (load generator), Test A'")
    outs = []
    for term, ext in (("pngcairo size 1000,640 font 'sans,11'", "png"), ("svg size 1000,640 font 'sans,11'", "svg")):
        target = os.path.join(RESULTS, f"cpu_vs_calls.{ext}")
        script = f"""
set terminal {term}
set output '{target}'
set title "CPU against concurrent playback+echo calls (G.711, 50 RTP packets/s each way), {ncpu}-core machine\\nstrowger {rev}; 100 % = one core"
set xlabel 'concurrent calls'
set ylabel 'server CPU, % of one core (run time, /proc/PID/task/*/schedstat)'
set xrange [0:{xmax:.0f}]
set yrange [0:{ymax:.0f}]
set key at graph 0.99, graph 0.86 right top box opaque
set grid
set arrow from 0,{100 * ncpu} to {xmax:.0f},{100 * ncpu} nohead lc rgb '#cc0000' dt 3
set label 'all {ncpu} cores' at {xmax * 0.86:.0f},{100 * ncpu + 4} tc rgb '#cc0000'
plot {', '.join(lines)}
"""
        with open(os.path.join(d, f"plot_{ext}.gp"), "w") as f:
            f.write(script)
        r = subprocess.run(["gnuplot", f"plot_{ext}.gp"], cwd=d, capture_output=True, text=True)
        if r.returncode == 0:
            outs.append(os.path.relpath(target, ROOT))
        else:
            log(f"gnuplot ({ext}) failed: {r.stderr.strip()[:500]}")
    return outs


def report(args):
    res = load_results()
    if not res:
        log("no results yet (bench/results/latest.json)")
        return 1
    pngs = plot(res)
    m = res.get("machine", {})
    L = []
    L.append(f"## {m.get('date', '?')} — strowger {m.get('strowger_rev', '?')}")
    L.append("")
    L.append(f"Machine: {m.get('nproc')} × {m.get('cpu_model')} ({m.get('cpu_mhz')} MHz"
             f"{', AVX-512' if m.get('avx512') else ''}), {m.get('mem_mib')} MiB, Linux {m.get('kernel')}, "
             f"autogroup {m.get('sched_autogroup_enabled')}; {m.get('sipp')}; server: {m.get('server')} "
             f"({m.get('strowger_version', '')}), workers: {m.get('workers')}; load average at start "
             f"{m.get('loadavg_at_start')}.")
    L.append("")
    heading = len(L)  # --record gives its own heading and machine line
    a = res.get("A")
    for key in sorted(k for k in res if k == "A" or k.startswith("A-")):
        a_ = res[key]
        rb = a_["machine"].get("sipp_echo_rcvbuf", "kernel default")
        note = f"; SIPp echo socket receive buffer {rb}" if not str(rb).startswith("kernel") else ""
        lv = a_["levels"]
        L.append(f"### Test A{key[1:]} — playback + echo calls held, CPU over {a_['window_s']} s once all are up "
                 f"({a_['machine']['date']}, {a_['machine']['strowger_rev']}{note})")
        L.append("")
        L.append("```")
        L.append(lv[0]["server_cmd"])
        for x in lv:
            L.append(x["sipp_cmd"])
        L.append("```")
        L.append("")
        L.append("| calls (up / measured) | server CPU | CPU-ms per call-second | RSS idle → loaded | RSS per call | "
                 "RSS after calls ended | SIPp CPU | RTP echoed back (strowger's CDRs) | drops at SIPp's echo "
                 "socket in the window | successful / failed / retrans | other processes' CPU |")
        L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for x in lv:
            cd = x.get("server_cdr") or {}
            echo = (f"{cd['packets_received'] / max(1, cd['packets_sent']) * 100:.1f} %" if cd.get("records")
                    else "–")
            L.append(f"| {x['calls_up']} / {x['calls_measured']:.0f} | {x['server_cpu_pct']:.1f} % | "
                     f"**{x['ms_per_call_second']:.3f}** | {x['rss_idle_kib'] / 1024:.1f} → "
                     f"{x['rss_loaded_kib'] / 1024:.1f} MiB | {fnum(x['rss_per_call_kib'], 1)} KiB | "
                     f"{x['rss_after_calls_kib'] / 1024:.1f} MiB | {x['sipp_cpu_pct']:.1f} % | {echo} | "
                     f"{x['sipp_echo_socket_drops']:,} | "
                     f"{x['successful']} / {x['failed']} / {x['retransmissions']} | {x['others_cpu_pct']:.0f} % |")
        L.append("")
        thr = "; ".join(f"{x['calls']} calls: " + ", ".join(f"{t[0]} {t[1]} %" for t in x["server_busiest_threads"])
                        for x in lv)
        L.append(f"Server threads (busiest, % of a core over the window): {thr}.")
        rtp = []
        for x in lv:
            cd = x.get("server_cdr")
            if cd and cd["records"]:
                rtp.append(f"{x['calls']} calls: {cd['records']} CDRs, RTP sent {cd['packets_sent']:,} / received "
                           f"{cd['packets_received']:,} / lost {cd['packets_lost']:,} "
                           f"({cd['packets_received'] / max(1, cd['packets_sent']) * 100:.2f} % echoed back), "
                           f"max jitter {cd['jitter_ms_max']:.2f} ms")
        if rtp:
            L.append("")
            L.append("RTP per strowger's CDRs (whole calls; SIPp does not count RTP): " + "; ".join(rtp) + ".")
        L.append("")
    b = res.get("B")
    for key in sorted(k for k in res if k == "B" or k.startswith("B-")):
        b_ = res[key]
        fr, ff = b_["first_retransmission"], b_["first_failure"]
        L.append(f"### Test B{key[1:]} — {b_['calls_target']} calls at {b_.get('rate', 20)}/s held 600 s, at most {b_['seconds_limit']} s "
                 f"({b_['machine']['date']}, {b_['machine']['strowger_rev']})")
        L.append("")
        L.append("```")
        L.append(b_["server_cmd"])
        L.append(b_["sipp_cmd"])
        L.append("```")
        L.append("")
        L.append("| event | concurrent calls | t | server CPU (busiest thread) | SIPp CPU (busiest thread) | machine CPU | "
                 "saturated |")
        L.append("| --- | --- | --- | --- | --- | --- | --- |")
        for name, v in (("first SIP retransmission", fr), ("first failed call", ff)):
            if v:
                L.append(f"| {name} | **{v['calls']:,}** ({v['up']:,} up) | {v['t']:.0f} s | {v['server_pct_5s']:.0f} % "
                         f"({v['server_top_thread_pct_5s']:.0f} %) | {v['sipp_pct_5s']:.0f} % "
                         f"({v['sipp_top_thread_pct_5s']:.0f} %) | {v['machine_pct_5s']:.0f} % | {v['saturated']} |")
            else:
                L.append(f"| {name} | none up to {b_['max_calls']:,} calls | | | | | |")
        ls = b_.get("last_sample", {})
        L.append("")
        L.append(f"Stopped: {b_['stopped']}. Peak {b_['max_calls']:,} calls ({b_['max_up']:,} answered and up); at the "
                 f"last sample the server used {ls.get('server_pct', 0)} %, SIPp {ls.get('sipp_pct', 0)} % "
                 f"(threads {', '.join(f'{t[0]} {t[1]} %' for t in ls.get('sipp_threads', []))}), "
                 f"UDP receive-buffer drops {ls.get('rcvbuf_errors', 0):,}, of them at SIPp's echo socket "
                 f"{ls.get('sipp_echo_drops', 0):,}. Server RSS {b_['rss_idle_kib'] / 1024:.1f} → "
                 f"{b_['rss_peak_kib'] / 1024:.1f} MiB; SIPp totals: {b_['final']['FailedCall(C)']} failed, "
                 f"{b_['final']['Retransmissions(C)']} retransmissions"
                 f"{' (' + ', '.join(f'{k}: {v}' for k, v in b_.get('failure_reasons', {}).items()) + ')' if b_.get('failure_reasons') else ''}"
                 f"; server {b_['server_stop']['exit']}.")
        if b_["server_stop"].get("stderr_problems"):
            L.append("")
            L.append("strowger said: " + " / ".join(f"`{x}`" for x in b_["server_stop"]["stderr_problems"][:4]))
        L.append("")
    c = res.get("C")
    for key in sorted(k for k in res if k == "C" or k.startswith("C-")):
        c_ = res[key]
        L.append(f"### Test C{key[1:]} — signalling only, {c_['seconds']} s per rate "
                 f"({c_['machine']['date']}, {c_['machine']['strowger_rev']})")
        L.append("")
        L.append("```")
        L.append(c_["rates"][0]["server_cmd"])
        for x in c_["rates"]:
            L.append(x["sipp_cmd"])
        L.append("```")
        L.append("")
        L.append("| rate (calls/s) | calls | failed | retrans | achieved calls/s | server CPU | **CPU-ms per call** | "
                 "SIPp CPU | clean (< 0.1 % failed) |")
        L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for x in c_["rates"]:
            L.append(f"| {x['rate']} | {x['successful']:,} | {x['failed']} ({fnum(x['failed_pct'], 2)} %) | "
                     f"{x['retransmissions']} | {x['achieved_rate']} | {x['server_cpu_pct']} % | "
                     f"**{fnum(x['ms_per_call'], 3)}** | {x['sipp_cpu_pct']} % | {'yes' if x['clean'] else 'no'} |")
        L.append("")
        L.append(f"Highest clean rate: **{c_['highest_clean_rate'] or 'none'}** calls/s (tried up to "
                 f"{c_['rates'][-1]['rate']}/s).")
        L.append("")
    # comparison
    L.append("### Against the peers (../shared/peers.md; ×N = how many times strowger is better; C compared at "
             "the peer's rate)")
    L.append("")
    L.append("| | A: CPU-ms per call-second (200 / 400 calls) | A: RSS per call | B: calls at first retransmission / "
             "first failure | C: CPU-ms per call | C: highest clean calls/s |")
    L.append("| --- | --- | --- | --- | --- | --- |")
    ours_a = {}
    ours_rss = None
    if a:
        for x in a["levels"]:
            ours_a[x["calls"]] = x["ms_per_call_second"]
        per = [x["rss_per_call_kib"] for x in a["levels"] if x.get("rss_per_call_kib") is not None]
        ours_rss = max(per) if per else None
    ours_b = (b["first_retransmission"]["calls"] if b and b["first_retransmission"] else None,
              b["first_failure"]["calls"] if b and b["first_failure"] else None)
    b_none = b["max_calls"] if b else None
    ours_c = None
    if c:
        clean = [x["ms_per_call"] for x in c["rates"] if x["clean"] and x["ms_per_call"]]
        ours_c = (min(clean), max(clean)) if clean else None
    a_txt = " / ".join(fnum(ours_a.get(k), 3) for k in (200, 400))
    b_txt = " / ".join((f"{v:,}" if v else (f"none ≤ {b_none:,}" if b_none else "–")) for v in ours_b)
    c_txt = "–"
    if c:
        by_rate = {x["rate"]: x["ms_per_call"] for x in c["rates"] if x["ms_per_call"]}
        c_txt = ", ".join(f"{by_rate[r]:.3f} at {r}/s" for r in (100, 200, 800) if r in by_rate)
        if ours_c and c["rates"][-1]["rate"] > 800:
            c_txt += f"; {by_rate.get(c['rates'][-1]['rate'], 0):.3f} at {c['rates'][-1]['rate']}/s"
    hc = c["highest_clean_rate"] if c else None
    L.append(f"| **strowger** | **{a_txt}** | **{fnum(ours_rss, 1)} KiB** | **{b_txt}** | **{c_txt}** | "
             f"**{hc if hc else '–'}** (highest tried {c['rates'][-1]['rate'] if c else '–'}) |")
    for p in PEERS:
        a_cells = " / ".join(f"{ms}{ratio(ms, ours_a.get(k))}" for ms, k in zip(p["a_ms"], (200, 400)))
        rss_cell = f"{p['a_rss']}{ratio(p['a_rss_per_call_kib'], ours_rss)}"
        b_cells = " / ".join(
            f"{v:,}{ratio(v, o, True) if o else (' (≥' + ratio(v, b_none, True)[2:] if b_none else '')}"
            for v, o in zip((p["b_retrans"], p["b_fail"]), ours_b))
        # C at the peer's own rate(s): FreeSWITCH 200/s, Yate 100/s; Asterisk's 1.65–2.69 over 100–800/s is set
        # against strowger's dearest rate in that span (a lower bound on the ratio).
        c_ratio = ""
        if c:
            by_rate = {x["rate"]: x["ms_per_call"] for x in c["rates"] if x["ms_per_call"]}
            rates = p.get("c_rates", [p["c_clean"]])
            mine = [by_rate[r] for r in rates if r in by_rate]
            if mine:
                c_ratio = ratio(p["c_ms"], max(mine))
                if len(rates) > 1:
                    c_ratio = " (≥" + c_ratio[2:]
        c_cell = f"{p.get('c_ms_text', p['c_ms'])}{c_ratio}"
        L.append(f"| {p['name']} | {a_cells} | {rss_cell} | {b_cells} | {c_cell} | {p.get('c_clean_text', p['c_clean'])} |")
    L.append("")
    if a:
        best = min(x["ms_per_call_second"] for x in a["levels"])
        L.append(f"Kernel floor for a playback+echo call (peers.md): {FLOOR_MS} ms per call-second; strowger is at "
                 f"{best / FLOOR_MS:.1f}× the floor.")
        L.append("")
    for png in pngs:
        if png.endswith(".png"):
            L.append(f"![strowger CPU against concurrent calls]({os.path.relpath(os.path.join(ROOT, png), BENCH)})")
            L.append("")
    text = "\n".join(L) + "\n"
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "latest.md"), "w") as f:
        f.write(text)
    summary(args, "Tests A, B and C of the comparison paper (bench/lib/bench.py)", "\n".join(L[heading:]))
    log(f"wrote bench/results/latest.md{' and ' + ', '.join(pngs) if pngs else ''}")
    return 0


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="+", choices=["a", "b", "c", "report", "smoke", "info"])
    ap.add_argument("--server", default=os.environ.get("SERVER", "strowger"), choices=["strowger", "sipp-uas"])
    ap.add_argument("--bin", default=os.environ.get("STROWGER_BIN", os.path.join(ROOT, "target/release/strowger")))
    ap.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "0")))
    ap.add_argument("--levels", type=int, nargs="+", default=[200, 400], help="Test A concurrent calls")
    ap.add_argument("--rate", type=int, default=20, help="calls per second for Tests A and B (-r)")
    ap.add_argument("--window", type=int, default=30, help="Test A measurement window, s")
    ap.add_argument("--settle", type=int, default=3, help="Test A: seconds after all calls are up before measuring")
    ap.add_argument("--all-up", type=int, default=65, help="Test A: seconds all calls are up together (>= 60)")
    ap.add_argument("--min-hold", type=int, default=90, help="Test A: shortest hold (-d), s")
    ap.add_argument("--quiet-wait", type=int, default=int(os.environ.get("QUIET_WAIT", "60")),
                    help="before each measurement, wait up to this long while other processes are busy")
    ap.add_argument("--sipp-rcvbuf", type=int, default=int(os.environ.get("SIPP_RCVBUF", "0")),
                    help="A and B: SIPp's echo socket receive buffer, bytes (raises net.core.rmem_default "
                         "for the second SIPp needs to start; 0 = the kernel's default, as peers.md)")
    ap.add_argument("--tag", default=os.environ.get("TAG", ""),
                    help="store results as section A-TAG / B-TAG / C-TAG (supplementary runs)")
    ap.add_argument("--b-calls", type=int, default=3000)
    ap.add_argument("--b-seconds", type=int, default=150)
    ap.add_argument("--b-after-fail", type=int, default=15, help="Test B: stop this long after the first failure")
    ap.add_argument("--rates", type=int, nargs="+", default=[100, 200, 400, 800, 1600, 3200])
    ap.add_argument("--c-seconds", type=int, default=30, help="Test C: -m = rate × this")
    ap.add_argument("--c-all", action="store_true", help="Test C: run every rate even after an unclean one")
    add_record_flag(ap)
    args = ap.parse_args()

    QUIET_WAIT[0] = args.quiet_wait
    TAG[0] = args.tag
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    if not shutil.which("sipp") and any(w in args.what for w in "abc"):
        log("sipp not found: run bench/deps.sh (Debian package sip-tester)")
        return 2
    if args.server == "strowger" and any(w in ("a", "b", "c", "smoke", "info") for w in args.what):
        if not os.access(args.bin, os.X_OK):
            log(f"{args.bin} missing: cargo build --release -p strowger")
            return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rundir = os.path.join(OUT, stamp)
    os.makedirs(rundir, exist_ok=True)
    try:
        if args.server == "strowger":
            args.config = make_config(args, rundir)
        info = None
        status = 0
        for w in args.what:
            if w in ("a", "b", "c", "info") and info is None:
                info = machine_info(args)
                log("machine: " + json.dumps(info, ensure_ascii=False))
            if w == "a":
                save_results("A", test_a(args, rundir), info)
            elif w == "b":
                save_results("B", test_b(args, rundir), info)
            elif w == "c":
                save_results("C", test_c(args, rundir), info)
            elif w == "smoke":
                status = 0 if smoke(args, rundir) else 1
            elif w == "report":
                status = report(args) or status
        log(f"raw logs: {os.path.relpath(rundir, ROOT)}")
        return status
    finally:
        kill_children()


if __name__ == "__main__":
    sys.exit(main())
