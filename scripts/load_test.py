#!/usr/bin/python3
"""Load test of `nemotron serve`: N concurrent streaming clients for D seconds (stdlib only).

    scripts/load_test.py --nemotron build/nemotron                    # 32 clients, 300 s
    scripts/load_test.py --nemotron build/nemotron --clients 8 --seconds 20   # the ctest version
    scripts/load_test.py --url http://127.0.0.1:8080 --pid PID        # a server already running

Without --url it starts `NEMOTRON serve --port 0 [--server-arg …]` itself (the embedded tiny
model unless a --server-arg --model DIR is given) and stops it at the end. Each client loops
over /v1/chat/completions stream requests; a fraction (--disconnect, 20%) closes its connection
at a random point mid-stream. Fails (exit 1) on:
  - any error on a valid request (a non-200 status, a socket error, a malformed stream);
  - a malformed stream: a `data:` line that is not JSON, [DONE] not exactly once or not last,
    no finish_reason in the last chunk with choices, or more than one finish_reason;
  - a seeded request (temperature 0.8, seed 7) whose text under load differs from the same
    request run alone before the load;
  - server RSS growth above --rss-growth (+ --rss-slack-mib) between the first sample after
    warm-up and the last;
  - the server not healthy (/health 200) after the load, or not exiting cleanly on SIGTERM.
Prints a summary: requests, tokens, tok/s, TTFT p50/p99, errors, disconnects, RSS first/last.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "List five uses for a paperclip.",
    "What is the capital of France? Answer briefly.",
    "Describe the sea at night in one paragraph.",
    "Translate 'good morning' into three languages.",
]
SEEDED = {"messages": [{"role": "user", "content": "Tell me about robots and the moon."}],
          "temperature": 0.8, "seed": 7, "max_tokens": 48}


# ---- the server ---------------------------------------------------------------------------------
def start_server(binary, args=(), timeout=60.0):
    """Starts `binary serve --port 0 ARGS`; returns (proc, host, port) once it prints
    'listening on http://HOST:PORT'. The server's output keeps draining to stderr."""
    proc = subprocess.Popen([binary, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    found = {}
    ready = threading.Event()
    log = []

    def pump():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            log.append(line)
            m = re.search(r"listening on http://([^\s:/]+|\[[^\]]+\]):(\d+)", line)
            if m and not ready.is_set():
                found["host"], found["port"] = m.group(1).strip("[]"), int(m.group(2))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout) or "port" not in found:
        proc.kill()
        raise RuntimeError("server did not start:\n" + "".join(log))
    # It listens before it is ready: /health turns 200 after the warm-up.
    end = time.monotonic() + timeout
    while health(found["host"], found["port"]) != 200:
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError("server not healthy:\n" + "".join(log))
        time.sleep(0.05)
    return proc, found["host"], found["port"]


def stop_server(proc, timeout=15.0):
    """SIGTERM, then the exit code (None if it had to be killed)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---- one streaming request ----------------------------------------------------------------------
class StreamResult:
    def __init__(self):
        self.status = None
        self.error = None        # a string when the request failed or the stream is malformed
        self.text = ""           # content + reasoning, concatenated deltas
        self.chunks = 0
        self.tokens = 0          # usage.completion_tokens
        self.ttft = None         # seconds to the first chunk carrying text
        self.disconnected = False


def stream_chat(host, port, body, disconnect_after=None, timeout=120.0):
    """POST a streaming chat request and check the stream. disconnect_after=k: close the
    connection after k data events (the request is then not expected to finish)."""
    r = StreamResult()
    req = dict(body, stream=True, stream_options={"include_usage": True})
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(req),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        r.status = resp.status
        if resp.status != 200:
            r.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return r
        ctype = resp.getheader("Content-Type", "")
        if not ctype.startswith("text/event-stream"):
            r.error = f"Content-Type {ctype!r}"
            return r
        events, done, finishes, last_choice_finish = 0, 0, 0, None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\r\n")
            if not line or line.startswith(":"):
                continue
            if not line.startswith("data:"):
                r.error = f"not an SSE data line: {line[:200]!r}"
                return r
            data = line[5:].lstrip(" ")
            events += 1
            if done:
                r.error = "data after [DONE]"
                return r
            if data == "[DONE]":
                done += 1
                continue
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError as e:
                r.error = f"data is not JSON ({e}): {data[:200]!r}"
                return r
            if "error" in chunk:
                r.error = f"error event: {data[:300]}"
                return r
            r.chunks += 1
            for ch in chunk.get("choices") or []:
                d = ch.get("delta") or {}
                piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
                if piece and r.ttft is None:
                    r.ttft = time.monotonic() - t0
                r.text += piece
                last_choice_finish = ch.get("finish_reason")
                if last_choice_finish:
                    finishes += 1
            if chunk.get("usage"):
                r.tokens = int(chunk["usage"]["completion_tokens"])
            if disconnect_after is not None and events >= disconnect_after:
                r.disconnected = True
                return r
        if done != 1:
            r.error = f"[DONE] {done} times"
        elif finishes != 1 or not last_choice_finish:
            r.error = f"{finishes} finish_reasons; last chunk with choices has {last_choice_finish!r}"
        elif r.chunks < 2:
            r.error = f"only {r.chunks} chunks"
        return r
    except (OSError, http.client.HTTPException, UnicodeDecodeError, ValueError, KeyError) as e:
        r.error = f"{type(e).__name__}: {e}"
        return r
    finally:
        conn.close()  # mid-stream: the server sees the disconnect and cancels


def health(host, port):
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/health")
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError as e:
        return str(e)


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


# ---- the load ------------------------------------------------------------------------------------
class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.completed = self.disconnects = self.tokens = 0
        self.seeded = 0
        self.errors = []
        self.ttfts = []


def client_loop(i, host, port, deadline, args, reference, stats):
    rng = random.Random(1000 + i)
    while time.monotonic() < deadline:
        if rng.random() < args.seeded_fraction:
            res = stream_chat(host, port, SEEDED)
            with stats.lock:
                stats.requests += 1
                stats.seeded += 1
                if res.error:
                    stats.errors.append(f"client {i} seeded: {res.error}")
                elif res.text != reference:
                    stats.errors.append(f"client {i}: seeded text differs under load:\n"
                                        f"  alone: {reference!r}\n  load:  {res.text!r}")
                else:
                    stats.completed += 1
                    stats.tokens += res.tokens
                    if res.ttft is not None:
                        stats.ttfts.append(res.ttft)
            continue
        body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "max_tokens": rng.randint(8, args.max_tokens),
                "temperature": rng.choice([0.0, 0.7, 1.0])}
        if rng.random() < 0.5:
            body["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
        cut = rng.randint(1, 12) if rng.random() < args.disconnect else None
        res = stream_chat(host, port, body, disconnect_after=cut)
        with stats.lock:
            stats.requests += 1
            if res.error:
                stats.errors.append(f"client {i}: {res.error}")
            elif res.disconnected:
                stats.disconnects += 1
            else:
                stats.completed += 1
                stats.tokens += res.tokens
                if res.ttft is not None:
                    stats.ttfts.append(res.ttft)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--nemotron", help="the nemotron binary: start `serve --port 0` on it")
    src.add_argument("--url", help="an already running server (RSS needs --pid)")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra argument for `nemotron serve` (repeatable), e.g. --server-arg=--model=DIR")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--max-tokens", type=int, default=96, help="each request asks for 8..N tokens")
    ap.add_argument("--disconnect", type=float, default=0.2, help="fraction of requests cut mid-stream")
    ap.add_argument("--seeded-fraction", type=float, default=0.1,
                    help="fraction of requests that repeat the seeded reference request")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before RSS counts (default 25%%)")
    ap.add_argument("--rss-growth", type=float, default=0.10,
                    help="max RSS growth, first sample after warm-up to last (fraction) ...")
    ap.add_argument("--rss-slack-mib", type=float, default=4.0,
                    help="... plus this much (the allocator's per-thread arenas fill in the first "
                         "minute: +2 MiB of a 20 MiB server seen in 20 s runs)")
    args = ap.parse_args()

    proc = None
    if args.nemotron:
        proc, host, port = start_server(args.nemotron, args.server_arg)
        pid = proc.pid
    else:
        u = urlsplit(args.url)
        host, port, pid = u.hostname, u.port or 80, args.pid
    failures = []
    try:
        # The seeded reference, alone (twice: it must be reproducible to begin with).
        ref = [stream_chat(host, port, SEEDED) for _ in range(2)]
        for r in ref:
            if r.error:
                raise SystemExit(f"load_test: FAILED: the seeded reference request failed: {r.error}")
        if ref[0].text != ref[1].text:
            failures.append(f"seeded request not reproducible alone: {ref[0].text!r} vs {ref[1].text!r}")
        reference = ref[0].text
        print(f"load_test: {host}:{port}, {args.clients} clients for {args.seconds:g} s; "
              f"seeded reference: {len(reference)} chars, {ref[0].tokens} tokens", flush=True)

        stats = Stats()
        warmup = args.warmup if args.warmup is not None else 0.25 * args.seconds
        interval = max(0.5, min(5.0, args.seconds / 40))
        rss = []  # (t, KiB) after warm-up
        start = time.monotonic()
        deadline = start + args.seconds
        threads = [threading.Thread(target=client_loop, daemon=True,
                                    args=(i, host, port, deadline, args, reference, stats))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        next_report = start + 30
        while any(t.is_alive() for t in threads):
            time.sleep(interval)
            now = time.monotonic()
            if pid and now - start >= warmup and now < deadline:
                try:
                    rss.append((now - start, rss_kib(pid)))
                except OSError:
                    failures.append("server process gone")
                    break
            if now >= next_report:
                next_report += 30
                with stats.lock:
                    print(f"  {now - start:5.0f} s: {stats.requests} requests, {stats.tokens} tokens, "
                          f"{len(stats.errors)} errors" + (f", RSS {rss[-1][1] / 1024:.1f} MiB" if rss else ""),
                          flush=True)
            if now > deadline + 180:
                failures.append("clients still running 180 s after the deadline")
                break
        elapsed = time.monotonic() - start

        # After the load: healthy, and the seeded request still gives the reference alone.
        h = health(host, port)
        if h != 200:
            failures.append(f"/health after the load: {h}")
        after = stream_chat(host, port, SEEDED)
        if after.error or after.text != reference:
            failures.append(f"seeded request after the load differs: {after.error or repr(after.text)}")

        tps = stats.tokens / elapsed if elapsed > 0 else 0.0
        print(f"requests      {stats.requests} ({stats.completed} completed, {stats.disconnects} "
              f"disconnected on purpose, {stats.seeded} seeded)")
        print(f"tokens        {stats.tokens} generated in completed requests, {tps:.1f} tok/s over {elapsed:.1f} s")
        print(f"TTFT          p50 {percentile(stats.ttfts, 50) * 1e3:.0f} ms, "
              f"p99 {percentile(stats.ttfts, 99) * 1e3:.0f} ms ({len(stats.ttfts)} samples)")
        print(f"errors        {len(stats.errors)}")
        for e in stats.errors[:10]:
            print("  " + e)
        if stats.errors:
            failures.append(f"{len(stats.errors)} errors on valid requests")
        if stats.completed < args.clients:
            failures.append(f"only {stats.completed} requests completed")
        if args.disconnect > 0 and stats.disconnects == 0:
            failures.append("no request was disconnected: the disconnect path was not exercised")
        if args.seeded_fraction > 0 and stats.seeded == 0:
            failures.append("no seeded request ran under load")
        if rss:
            first, last = rss[0][1], rss[-1][1]
            peak = max(k for _, k in rss)
            growth = (last - first) / first if first else 0.0
            bound_kib = args.rss_growth * first + args.rss_slack_mib * 1024
            print(f"RSS           first after warm-up {first / 1024:.1f} MiB (t={rss[0][0]:.0f} s), "
                  f"last {last / 1024:.1f} MiB (t={rss[-1][0]:.0f} s), peak {peak / 1024:.1f} MiB, "
                  f"growth {growth * 100:+.1f}% = {(last - first) / 1024:+.1f} MiB "
                  f"(bound {args.rss_growth * 100:.0f}% + {args.rss_slack_mib:g} MiB = {bound_kib / 1024:.1f} MiB), "
                  f"{len(rss)} samples")
            if last - first > bound_kib:
                failures.append(f"RSS grew {(last - first) / 1024:.1f} MiB ({growth * 100:.1f}%) after warm-up "
                                f"(bound {bound_kib / 1024:.1f} MiB)")
        elif pid:
            failures.append("no RSS sample after warm-up (run longer or lower --warmup)")
        else:
            print("RSS           not measured (no --pid)")
    finally:
        if proc is not None:
            code = stop_server(proc)
            if code != 0:
                failures.append(f"server exit code on SIGTERM: {code}")
    if failures:
        for f in failures:
            print("load_test: FAILED: " + f)
        return 1
    print("load_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
