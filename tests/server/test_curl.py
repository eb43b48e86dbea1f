#!/usr/bin/python3
"""`nemotron serve` through the system curl binary: what a shell user sees.

    tests/server/test_curl.py build/nemotron

Starts the server on port 0 (embedded tiny model) and checks, parsing curl's -i output (status
line + headers + body): GET / is the embedded chat page (byte for byte src/server/web/index.html),
/v1/models, a non-streamed chat completion, the same request streamed with -N (text/event-stream,
every data: line JSON, [DONE] exactly once and last, one finish_reason, the deltas concatenate to
the non-streamed text at temperature 0), a 400 and a 404 with OpenAI error bodies, and a client
that hangs up mid-stream (curl --max-time) leaving the server healthy.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from load_test import start_server, stop_server  # noqa: E402

CURL = "/usr/bin/curl"
failures = []
passed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    (passed if cond else failures).append(what)
    return cond


def curl(*args, timeout=60):
    """Runs curl -sS -i ARGS; returns (curl exit code, HTTP status, {header: value}, body bytes)."""
    p = subprocess.run([CURL, "-sS", "-i", *args], capture_output=True, timeout=timeout)
    out = p.stdout
    status, headers = None, {}
    # Skip interim responses (100 Continue): the last header block before the body counts.
    while out.startswith(b"HTTP/"):
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        out = rest
        if status != 100:
            break
    return p.returncode, status, headers, out


def post_json(url, body, *extra):
    return curl(*extra, "-X", "POST", url, "-H", "Content-Type: application/json", "-d", json.dumps(body))


def sse_events(body):
    """data: payloads of an SSE body, in order (blank-line separated events, one data line each)."""
    events = []
    for block in body.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
        data = [ln[5:].lstrip(" ") for ln in block.split("\n") if ln.startswith("data:")]
        if data:
            events.append("\n".join(data))
    return events


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: test_curl.py PATH/TO/nemotron")
    if not os.access(CURL, os.X_OK):
        print("=" * 78 + f"\nSKIPPED: no {CURL} (apt package 'curl'); run scripts/install-server-test-deps.sh\n" + "=" * 78)
        return 77
    proc, host, port = start_server(sys.argv[1])
    base = f"http://{host}:{port}"
    try:
        # The chat page.
        rc, st, hd, body = curl(base + "/")
        page = open(os.path.join(ROOT, "src/server/web/index.html"), "rb").read()
        check(rc == 0 and st == 200, f"GET / → 200 (curl {rc}, HTTP {st})")
        check(hd.get("content-type", "").startswith("text/html"), f"GET / content-type {hd.get('content-type')!r}")
        check(body == page, f"GET / is src/server/web/index.html byte for byte ({len(body)} vs {len(page)} bytes)")

        rc, st, hd, body = curl(base + "/health")
        check(st == 200, f"/health → {st}")

        rc, st, hd, body = curl(base + "/v1/models")
        models = json.loads(body)
        check(st == 200 and hd.get("content-type", "").startswith("application/json"), "/v1/models 200 JSON")
        check(models.get("object") == "list" and len(models.get("data", [])) >= 1, "/v1/models lists a model")
        model = models["data"][0]["id"]

        # Non-streamed chat completion.
        req = {"model": model, "messages": [{"role": "user", "content": "Say hello."}],
               "temperature": 0, "max_tokens": 20, "chat_template_kwargs": {"enable_thinking": False}}
        rc, st, hd, body = post_json(base + "/v1/chat/completions", req)
        check(st == 200 and hd.get("content-type", "").startswith("application/json"), f"chat → {st} JSON")
        r = json.loads(body)
        msg = r["choices"][0]["message"]
        check(r["object"] == "chat.completion" and len(r["choices"]) == 1, "one chat.completion choice")
        check(isinstance(msg["content"], str), "message.content is a string")
        check(0 < r["usage"]["completion_tokens"] <= 20, f"usage.completion_tokens {r['usage']['completion_tokens']}")

        # The same, streamed (-N: no buffering).
        rc, st, hd, body = post_json(base + "/v1/chat/completions",
                                     dict(req, stream=True, stream_options={"include_usage": True}), "-N")
        check(st == 200 and hd.get("content-type", "").startswith("text/event-stream"),
              f"stream → {st} {hd.get('content-type')!r}")
        check("content-length" not in hd, "stream has no Content-Length")
        events = sse_events(body)
        check(events.count("[DONE]") == 1 and events[-1] == "[DONE]",
              f"[DONE] exactly once, last ({events.count('[DONE]')} times)")
        chunks = [json.loads(e) for e in events if e != "[DONE]"]  # raises if not JSON
        check(len(chunks) >= 3, f"{len(chunks)} chunks")
        check(all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks),
              "every chunk: chat.completion.chunk, one id")
        finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
        check(finishes == [r["choices"][0]["finish_reason"]], f"one finish_reason, as non-streamed: {finishes}")
        with_choices = [c for c in chunks if c["choices"]]
        check(bool(with_choices[-1]["choices"][0].get("finish_reason")), "finish_reason in the last chunk with choices")
        check(chunks[-1].get("usage", {}).get("completion_tokens") == r["usage"]["completion_tokens"],
              "include_usage: final usage chunk = non-streamed usage")
        text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
        check(text == msg["content"], "streamed deltas concatenate to the non-streamed text")

        # Errors: OpenAI error bodies.
        rc, st, hd, body = post_json(base + "/v1/chat/completions", dict(req, temperature=-1))
        err = json.loads(body).get("error", {})
        check(st == 400 and isinstance(err.get("message"), str) and err.get("type"), f"temperature -1 → {st} {err}")
        rc, st, hd, body = curl("-X", "POST", base + "/v1/chat/completions", "-H", "Content-Type: application/json",
                                "-d", "{not json")
        check(st == 400 and "error" in json.loads(body), f"malformed JSON → {st}")
        rc, st, hd, body = curl(base + "/v1/no-such-route")
        check(st == 404, f"unknown route → {st}")

        # A client that hangs up mid-stream: curl reads at 2 KB/s and gives up after 1 s (exit 28)
        # on a long reply (the rate limit, not the model's speed, keeps the stream unfinished: the
        # tiny model writes 3000 tokens in under a second).
        long_req = dict(req, max_tokens=3000, ignore_eos=True, temperature=0.8, stream=True)
        rc, st, hd, body = post_json(base + "/v1/chat/completions", long_req, "-N", "--max-time", "1",
                                     "--limit-rate", "2k")
        check(rc == 28 and st == 200 and len(sse_events(body)) >= 2,
              f"hang-up mid-stream: curl exit {rc}, HTTP {st}, {len(sse_events(body))} events before")
        rc, st, hd, body = curl(base + "/health")
        check(st == 200, f"/health after the hang-up → {st}")
        rc, st, hd, body = post_json(base + "/v1/chat/completions", req)
        check(st == 200 and json.loads(body)["choices"][0]["message"]["content"] == msg["content"],
              "the same greedy request after the hang-up gives the same text")
    finally:
        code = stop_server(proc)
        check(code == 0, f"server exits 0 on SIGTERM ({code})")
    print(f"curl: {len(passed)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
