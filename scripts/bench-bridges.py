#!/usr/bin/env python3
"""The AEP-0005 bridges' cost and lag (docs/benchmarks.md "Bridges").

For each broker (embedded; real Kafka when KAFKA_BROKERS is set) and each
request size (batches of 100, one event a request), a fresh gateway runs a
10 s `aepbench ingest --max` phase with the bridges off, then another
with all three on (CloudEvents, OCSF, OTLP logs to a real OpenTelemetry
Collector); off and on alternate, ROUNDS times. Reported per phase: ingest
events/s, the CPU of every process (gateway, broker JVM, collector) from the
phase's start until the bridges have caught up, per ingested event, the time
the bridges took to catch up after the phase, and the largest lag seen.

Needs: go (builds the gateway, aepbench and integration/otelcol, or takes
AEP_OTELCOL). Usage: scripts/bench-bridges.py [ROUNDS]
"""
import json, os, re, shutil, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
TICK = os.sysconf("SC_CLK_TCK")


def build(tmp):
    gw, ctl = os.path.join(tmp, "aep-gateway"), os.path.join(tmp, "aepbench")
    subprocess.run(["go", "build", "-o", gw, "./cmd/aep-gateway"], cwd=ROOT, check=True)
    subprocess.run(["go", "build", "-o", ctl, "./cmd/aepbench"], cwd=ROOT, check=True)
    col = os.environ.get("AEP_OTELCOL") or os.path.join(tmp, "otelcol")
    if not os.environ.get("AEP_OTELCOL"):
        subprocess.run(["go", "build", "-C", "integration/otelcol", "-o", col, "."], cwd=ROOT, check=True)
    return gw, ctl, col


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu(pid):
    """utime+stime of pid and its reaped children, seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK


def wait_http(url, t=30):
    end = time.time() + t
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


def metrics(base):
    out = {}
    for line in urllib.request.urlopen(base + "/metrics", timeout=5).read().decode().splitlines():
        if line.startswith("aep_bridge_"):
            series, v = line.rsplit(" ", 1)
            out[series] = float(v)
    return out


def bridged(m):
    per = {}
    for s, v in m.items():
        mm = re.match(r'aep_bridge_records_total\{bridge="(\w+)"', s)
        if mm:
            per[mm.group(1)] = per.get(mm.group(1), 0) + v
    lag = sum(v for s, v in m.items() if s.startswith("aep_bridge_lag_records"))
    return per, lag


def phase(gw, ctl, col, tmp, broker, on, batch, n):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [gw, "--listen", f"127.0.0.1:{port}", "--log-level", "warn", "--audit-seal", "off"]
    tag = f"bb{int(time.time()*1000)}"
    if broker == "embedded":
        args += ["--data-dir", os.path.join(tmp, tag), "--embedded-kafka-listen", "127.0.0.1:0"]
    else:
        args += ["--kafka-brokers", os.environ["KAFKA_BROKERS"], "--topic-template", tag + ".{tenant}.events",
                 "--topic-partitions", "6", "--topic-replication-factor", "1"]
    procs = []
    if on:
        cport = free_port()
        cfg = os.path.join(tmp, tag + ".yaml")
        open(cfg, "w").write(f"""receivers: {{otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:{cport}}}}}}}}}
exporters: {{file: {{path: {os.path.join(tmp, tag + '.logs.jsonl')}}}}}
service: {{telemetry: {{metrics: {{level: none}}}}, pipelines: {{logs: {{receivers: [otlp], exporters: [file]}}}}}}
""")
        c = subprocess.Popen([col, "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(("collector", c))
        args += ["--node-id", tag, "--cloudevents-bridge", "--ocsf-bridge", "--otlp-logs-endpoint", f"http://127.0.0.1:{cport}/v1/logs",
                 "--cloudevents-bridge-group", tag + "-ce", "--ocsf-bridge-group", tag + "-ocsf", "--otlp-logs-group", tag + "-otlp"]
    g = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, tag + ".log"), "w"))
    procs.append(("gateway", g))
    try:
        wait_http(base + "/healthz")
        time.sleep(2)
        pids = {name: p.pid for name, p in procs}
        if broker == "kafka":
            pids["broker"] = int(subprocess.run(["pgrep", "-f", "kafka.Kafka"], capture_output=True, text=True).stdout.split()[0])
        c0 = {k: cpu(p) for k, p in pids.items()}
        t0 = time.time()
        out = subprocess.run([ctl, "ingest", "--url", base, "--max", "--batch", str(batch), "--duration", "10s", "--output", "json"],
                             capture_output=True, text=True, check=True).stdout
        res = json.loads(out)["gateway"]
        accepted = res["accepted"]
        t_end = time.time()
        maxlag, drained = 0, None
        if on:
            while time.time() - t_end < 120:
                per, lag = bridged(metrics(base))
                maxlag = max(maxlag, lag)
                if per and all(per.get(b, 0) >= accepted for b in ("cloudevents", "ocsf", "otlp")):
                    drained = time.time() - t_end
                    break
                time.sleep(0.25)
        c1 = {k: cpu(p) for k, p in pids.items()}
        return {"broker": broker, "bridges": "on" if on else "off", "batch": batch, "round": n,
                "events_per_s": round(res["accepted_per_sec"]), "accepted": accepted,
                "cpu_us_per_event": {k: round((c1[k] - c0[k]) / accepted * 1e6, 2) for k in c0},
                "drained_s": None if drained is None else round(drained, 2), "max_lag_seen": maxlag}
    finally:
        for _, p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    tmp = tempfile.mkdtemp(prefix="bench-bridges-")
    try:
        gw, ctl, col = build(tmp)
        brokers = ["embedded"] + (["kafka"] if os.environ.get("KAFKA_BROKERS") else [])
        print("load average", open("/proc/loadavg").read().split()[:3], flush=True)
        for n in range(ROUNDS):
            for broker in brokers:
                for batch in (100, 1):
                    for on in (False, True):
                        print(json.dumps(phase(gw, ctl, col, tmp, broker, on, batch, n)), flush=True)
        print("load average", open("/proc/loadavg").read().split()[:3], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
