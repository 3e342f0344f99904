#!/usr/bin/env bash
# The same call workload from SIPp and from strowger-load against strowger, one fresh strowger
# per generator, and both sets of figures side by side (issue 5: "agrees with SIPp within 10 %").
#
#   bench/load_vs_sipp.sh                       # 200 calls at 50/s held 10 s, RTP echo, to 44444
#   CALLS=500 RATE=50 HOLD=20 bench/load_vs_sipp.sh
#   NO_BUILD=1 STROWGER_BIN=… LOAD_BIN=… bench/load_vs_sipp.sh
#
# Per generator: calls attempted / completed / failed, the attempt rate, set-up time (SIPp's
# ResponseTime1 = INVITE→200, which its scenario times; strowger-load's own µs timestamps),
# RTP packets and loss as strowger's CDRs saw them (SIPp does not count RTP), strowger-load's own
# RTP counts, and each generator's CPU (utime+stime from wait4). Every process it starts is killed
# when it ends; output goes to bench/out/load_vs_sipp-<date>/ (not committed).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_on_help "$0" "" "$@"
cd "$(dirname "$0")/.."
CALLS=${CALLS:-200} RATE=${RATE:-50} HOLD=${HOLD:-10} EXT=${EXT:-44444}
if [[ -z "${NO_BUILD:-}" ]]; then
  cargo build --release -q -p strowger -p strowger-load
fi
export STROWGER_BIN=${STROWGER_BIN:-target/release/strowger}
export LOAD_BIN=${LOAD_BIN:-target/release/strowger-load}
export CALLS RATE HOLD EXT
export OUT=bench/out/load_vs_sipp-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
command -v sipp >/dev/null || { echo "sipp missing: bench/deps.sh installs it" >&2; exit 1; }
exec python3 - <<'EOF'
import json, os, random, socket, subprocess, sys, time

calls, rate, hold, ext = int(os.environ["CALLS"]), float(os.environ["RATE"]), float(os.environ["HOLD"]), os.environ["EXT"]
out = os.environ["OUT"]
srv_bin, load_bin = os.environ["STROWGER_BIN"], os.environ["LOAD_BIN"]

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def free_range(n):
    for _ in range(500):
        lo = random.randrange(20000, 32000 - n) & ~1
        socks = []
        try:
            for p in range(lo, lo + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); socks.append(s); s.bind(("127.0.0.1", p))
            return lo
        except OSError:
            pass
        finally:
            for s in socks: s.close()
    sys.exit("no free port range")

def start_server(tag):
    d = os.path.join(out, tag); os.makedirs(d, exist_ok=True)
    cfg = subprocess.run([srv_bin, "default-config"], capture_output=True, text=True, check=True).stdout
    cfg = cfg.replace("max_calls = 1000", "max_calls = 100000")
    # SIPp calls from a trusted address: the default context, unchallenged.
    cfg = cfg.replace("\ntrusted = []\n", "\ntrusted = [\"127.0.0.1\"]\n")
    open(os.path.join(d, "strowger.toml"), "w").write(cfg)
    port, lo = free_port(), free_range(2 * calls + 200)
    p = subprocess.Popen([srv_bin, "--config", os.path.join(d, "strowger.toml"), "--sip-listen", f"127.0.0.1:{port}",
                          "--rtp-ports", f"{lo}-{lo + 2 * calls + 199}", "--data-dir", os.path.join(d, "data")],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "strowger.log"), "w"), start_new_session=True)
    time.sleep(1.0)
    return p, port, d

def run_measured(cmd, cwd, stdout):
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=open(os.path.join(cwd, "stderr.txt"), "w"), start_new_session=True)
    _, status, ru = os.wait4(p.pid, 0)
    return time.time() - t0, ru.ru_utime + ru.ru_stime, status

def cdrs(d):
    path = os.path.join(d, "data", "cdr.jsonl")
    rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    return {"cdrs": len(rows), "answered": sum(1 for r in rows if r.get("answer")),
            "srv_rtp_sent": sum(r["packets_sent"] for r in rows), "srv_rtp_received": sum(r["packets_received"] for r in rows),
            "srv_rtp_lost": sum(r["packets_lost"] for r in rows),
            "srv_jitter_ms_mean": round(sum(r["jitter_ms"] for r in rows) / max(1, len(rows)), 2)}

results = {}
# SIPp
srv, port, d = start_server("sipp")
try:
    sp, mp = free_port(), free_range(2 * calls + 10)
    cmd = ["sipp", "-sn", "uac", "-rtp_echo", "-d", str(int(hold * 1000)), "-s", ext, f"127.0.0.1:{port}",
           "-i", "127.0.0.1", "-p", str(sp), "-mp", str(mp), "-l", str(calls), "-m", str(calls), "-r", str(int(rate)),
           "-nostdin", "-trace_stat", "-stf", "stat.csv", "-fd", "1", "-timeout", str(int(calls / rate + hold + 60)) + "s"]
    wall, cpu, status = run_measured(cmd + ["-trace_screen"], d, subprocess.DEVNULL)
    time.sleep(1.0)
    rows = [l.strip().split(";") for l in open(os.path.join(d, "stat.csv")) if l.strip()]
    h, last = rows[0], rows[-1]
    col = lambda name: last[h.index(name)]
    def ms(v):  # SIPp writes HH:MM:SS:mmm:µµµ or HH:MM:SS:mmm
        parts = [int(x) for x in v.split(":")]
        return parts[0] * 3600e3 + parts[1] * 60e3 + parts[2] * 1e3 + parts[3] + (parts[4] / 1000 if len(parts) > 4 else 0)
    results["SIPp"] = {"attempted": int(col("TotalCallCreated")), "completed": int(col("SuccessfulCall(C)")),
                       "failed": int(col("FailedCall(C)")), "retransmissions": int(col("Retransmissions(C)")),
                       "setup_ms_mean": round(ms(col("ResponseTime1(C)")), 2), "wall_s": round(wall, 2),
                       "cpu_s": round(cpu, 2), **cdrs(d)}
finally:
    srv.terminate(); srv.wait()
# strowger-load
srv, port, d = start_server("strowger-load")
try:
    lo = free_range(2 * calls + 10)
    rep = open(os.path.join(d, "report.json"), "w")
    cmd = [os.path.abspath(load_bin), "call", "--target", f"127.0.0.1:{port}", "--ext", ext, "--calls", str(calls),
           "--rate", str(rate), "--hold", str(hold), "--rtp", "echo", "--json", "--quiet",
           "--rtp-ports", f"{lo}-{lo + 2 * calls + 9}", "--limit", str(calls)]
    wall, cpu, status = run_measured(cmd, d, rep)
    rep.close(); time.sleep(1.0)
    r = json.load(open(os.path.join(d, "report.json")))
    results["strowger-load"] = {"attempted": r["attempted"], "completed": r["completed"], "failed": r["failed"],
                                "retransmissions": r["retransmissions"], "setup_ms_mean": round(r["setup_us"]["mean"] / 1000, 2) if r["setup_us"]["mean"] is not None else None,
                                "setup_us_p50_p90_p99": [r["setup_us"]["p50"], r["setup_us"]["p90"], r["setup_us"]["p99"]],
                                "own_rtp_sent_received_lost": [r["rtp"]["sent"], r["rtp"]["received"], r["rtp"]["lost"]],
                                "own_jitter_mean_us": r["rtp"]["jitter_mean_us"], "late_frames": r["rtp"]["late_frames"],
                                "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), **cdrs(d)}
finally:
    srv.terminate(); srv.wait()

keys = ["attempted", "completed", "failed", "retransmissions", "cdrs", "answered", "srv_rtp_sent", "srv_rtp_received",
        "srv_rtp_lost", "srv_jitter_ms_mean", "setup_ms_mean", "setup_us_p50_p90_p99", "own_rtp_sent_received_lost",
        "own_jitter_mean_us", "late_frames", "wall_s", "cpu_s"]
print(f"workload: {calls} calls to {ext} at {rate:g}/s, held {hold:g} s, RTP echo; one fresh strowger per generator")
print(f"{'figure':28} | {'SIPp':>22} | {'strowger-load':>22} | diff")
for k in keys:
    a, b = results["SIPp"].get(k), results["strowger-load"].get(k)
    diff = ""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a:
        diff = f"{100 * (b - a) / a:+.1f} %"
    print(f"{k:28} | {str(a if a is not None else '-'):>22} | {str(b if b is not None else '-'):>22} | {diff}")
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=1)
print(f"raw files: {out}")
EOF
