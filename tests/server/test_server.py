#!/usr/bin/python3
"""End-to-end tests of `nemotron serve` over loopback, standard library only.

Starts the real binary (embedded tiny model, port 0) and drives every route: the SSE chunk
format, streaming == non-streaming, sampling, stop strings, logprobs, usage, errors
(400/401/404/413/429/503), auth, metrics, disconnects mid-stream and the SIGTERM drain.
Every check is counted; the exit status is 1 if any failed.

usage: test_server.py PATH/TO/nemotron
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build-srv/nemotron"
RESULTS = {"pass": 0, "fail": 0}


def check(name, cond, detail=""):
    if cond:
        RESULTS["pass"] += 1
    else:
        RESULTS["fail"] += 1
        print(f"FAIL {name}: {detail}", flush=True)
    return cond


class Server:
    """A `nemotron serve` child process; stderr is collected line by line."""

    def __init__(self, *args, wait_ready=True):
        self.proc = subprocess.Popen([BIN, "serve", "--port", "0", "-t", "1", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        self.early_health = []  # /health answers seen while loading
        got = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.match(r"listening on http://([\d.]+):(\d+)", line)
                if m and not got.is_set():
                    self.host, self.port = m.group(1), int(m.group(2))
                    got.set()
            got.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not got.wait(30) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not print 'listening on': " + "\n".join(self.lines))
        if wait_ready:
            deadline = time.time() + 60
            while time.time() < deadline:
                st, body = self.get("/health")
                if st == 200:
                    break
                self.early_health.append((st, body))
                time.sleep(0.02)
            else:
                self.proc.kill()
                raise RuntimeError("server never became ready")

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        c = self.conn()
        h = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def post(self, path, body, headers=None):
        return self.request("POST", path, body=body, headers=headers)

    def stream(self, path, body, headers=None):
        """POST with stream=true: returns (status, [raw lines]) after the server closes the stream."""
        c = self.conn()
        c.request("POST", path, body=json.dumps({**body, "stream": True}),
                  headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        lines = r.read().decode("utf-8").split("\n")
        c.close()
        return r.status, r.getheader("Content-Type", ""), lines

    def metrics(self):
        st, text = self.get("/metrics")
        return parse_prometheus(text) if st == 200 else None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
            self.pump.join(10)  # every line the server wrote is in self.lines
            return rc
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def parse_prometheus(text):
    """Parses the text exposition format strictly; returns {families, samples} or raises."""
    fams, samples = {}, {}
    sample_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|\+Inf|NaN)$')
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            fams.setdefault(parts[2], {})[parts[1]] = parts[3] if len(parts) > 3 else ""
            continue
        if line.startswith("#"):
            continue
        m = sample_re.match(line)
        if not m:
            raise ValueError("bad sample line: " + line)
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return {"families": fams, "samples": samples}


def sse_events(lines):
    """Checks SSE framing; returns (payloads, problems): every event line is `data: ...`,
    events are separated by blank lines, and comments (': ping') are allowed."""
    payloads, problems = [], []
    for i, line in enumerate(lines):
        if line == "" or line.startswith(":"):
            continue
        if not line.startswith("data: "):
            problems.append(f"line {i} is not 'data: ': {line!r}")
            continue
        payloads.append(line[6:])
        if i + 1 < len(lines) and lines[i + 1] != "":
            problems.append(f"event at line {i} is not followed by a blank line")
    return payloads, problems


def chat_body(**kw):
    body = {"model": "test-model", "messages": [{"role": "user", "content": "Hello there"}],
            "max_tokens": 24, "temperature": 0}
    body.update(kw)
    return body


def chunks_of(lines):
    """Parses a chat/completion stream: (json chunks, number of [DONE], framing problems)."""
    payloads, problems = sse_events(lines)
    chunks, done = [], 0
    for i, p in enumerate(payloads):
        if p == "[DONE]":
            done += 1
            if i != len(payloads) - 1:
                problems.append("[DONE] is not the last event")
            continue
        try:
            chunks.append(json.loads(p))
        except ValueError:
            problems.append("not JSON: " + p[:80])
    return chunks, done, problems


def stream_text(chunks, chat=True):
    content = reasoning = ""
    finish = None
    for c in chunks:
        for ch in c.get("choices", []):
            if chat:
                d = ch.get("delta", {})
                content += d.get("content") or ""
                reasoning += d.get("reasoning_content") or ""
            else:
                content += ch.get("text") or ""
            finish = ch.get("finish_reason") or finish
    return content, reasoning, finish


def test_routes(s):
    st, body = s.get("/v1/models")
    check("models", st == 200 and body["object"] == "list" and body["data"][0]["object"] == "model", body)
    st2, body2 = s.get("/models")
    check("models alias", st2 == 200 and body2 == body, body2)
    st, body = s.get("/health")
    check("health ok", st == 200 and body == {"status": "ok"}, body)
    st, props = s.get("/props")
    check("props", st == 200 and props["n_ctx"] == 4096 and props["total_slots"] >= 1 and "chat_template" in props
          and props["speculation"] in ("mtp", "none", "ngram") and "build_info" in props, props)
    c = s.conn()
    c.request("GET", "/")
    r = c.getresponse()
    html = r.read()
    check("web page", r.status == 200 and r.getheader("Content-Type", "").startswith("text/html")
          and b"<html" in html.lower(), (r.status, html[:80]))
    st, body = s.post("/tokenize", {"content": "Hello world"})
    ids = body.get("tokens") if st == 200 else None
    check("tokenize", st == 200 and ids and all(isinstance(t, int) for t in ids), body)
    st, body = s.post("/detokenize", {"tokens": ids})
    check("detokenize round trip", st == 200 and body.get("content") == "Hello world", body)
    st, body = s.post("/tokenize", {"content": "Hello world", "with_pieces": True})
    check("tokenize pieces", st == 200 and "".join(t["piece"] for t in body["tokens"]) == "Hello world"
          and [t["id"] for t in body["tokens"]] == ids, body)
    msgs = [{"role": "user", "content": "Hi"}]
    st, on = s.post("/apply-template", {"messages": msgs})
    st2, off = s.post("/apply-template", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}})
    check("apply-template", st == 200 and st2 == 200 and "Hi" in on["prompt"] and on["prompt"] != off["prompt"],
          (on, off))
    st, body = s.post("/apply-template", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "adding",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "calc", "arguments": "{\"x\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"}]})
    check("apply-template history (parts, reasoning, tool calls)", st == 200 and "Be brief." in body["prompt"]
          and "calc" in body["prompt"], body)


def test_generation(s):
    # Non-streamed chat: shape and usage.
    st, r = s.post("/v1/chat/completions", chat_body())
    ok = st == 200
    check("chat status", ok, r)
    if not ok:
        return
    ch = r["choices"][0]
    u = r["usage"]
    check("chat shape", r["object"] == "chat.completion" and r["model"] == "test-model" and r["id"]
          and isinstance(r["created"], int) and ch["message"]["role"] == "assistant"
          and ch["finish_reason"] in ("stop", "length"), r)
    check("usage consistent", u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
          and 0 < u["completion_tokens"] <= 24 and u["prompt_tokens"] > 0
          and "cached_tokens" in u["prompt_tokens_details"], u)
    check("length finish", ch["finish_reason"] != "length" or u["completion_tokens"] == 24, (ch, u))
    sp = r.get("speculation", {})
    check("speculation object", {"mode", "drafted", "accepted", "verify_calls", "accepted_per_position"} <= set(sp)
          and r["timings"]["predicted_n"] == u["completion_tokens"], r)

    # Streaming: framing, chunk fields, equality with the non-streamed reply.
    st, ctype, lines = s.stream("/v1/chat/completions", chat_body())
    chunks, done, problems = chunks_of(lines)
    check("stream status", st == 200 and ctype.startswith("text/event-stream"), (st, ctype))
    check("sse framing", not problems and done == 1 and lines[-3:] == ["data: [DONE]", "", ""], problems or lines[-3:])
    bad = [c for c in chunks if c.get("object") != "chat.completion.chunk" or not c.get("id")
           or c.get("model") != "test-model" or not isinstance(c.get("created"), int)
           or len(c.get("choices", [])) != 1 or "delta" not in c["choices"][0]
           or "finish_reason" not in c["choices"][0]]
    check("chunk fields", chunks and not bad, bad[:2])
    check("one id per stream", len({c["id"] for c in chunks}) == 1, {c["id"] for c in chunks})
    check("first delta has the role", chunks and chunks[0]["choices"][0]["delta"].get("role") == "assistant", chunks[:1])
    content, reasoning, finish = stream_text(chunks)
    m = ch["message"]
    check("stream == non-stream (greedy)", content == (m.get("content") or "")
          and reasoning == m.get("reasoning_content", "") and finish == ch["finish_reason"],
          (content, reasoning, finish, m))
    finals = [c for c in chunks if c["choices"][0]["finish_reason"]]
    check("one finish chunk, last", len(finals) == 1 and finals[0] is chunks[-1], [c["choices"] for c in finals])

    # include_usage: a last chunk with empty choices and the usage.
    st, _, lines = s.stream("/v1/chat/completions", chat_body(stream_options={"include_usage": True}))
    chunks, done, problems = chunks_of(lines)
    last = chunks[-1] if chunks else {}
    check("include_usage", not problems and last.get("choices") == [] and last.get("usage", {}).get("completion_tokens")
          == u["completion_tokens"], last)

    # Completions: string prompt and token ids, streaming == non-streaming.
    body = {"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}
    st, r = s.post("/v1/completions", body)
    check("completions", st == 200 and r["object"] == "text_completion" and isinstance(r["choices"][0]["text"], str)
          and r["usage"]["completion_tokens"] <= 16, r)
    st, ctype, lines = s.stream("/v1/completions", body)
    chunks, done, problems = chunks_of(lines)
    text, _, finish = stream_text(chunks, chat=False)
    check("completions stream == non-stream", not problems and done == 1 and text == r["choices"][0]["text"]
          and finish == r["choices"][0]["finish_reason"]
          and all(c["object"] == "text_completion" for c in chunks), (text, r["choices"][0]))
    st, ids = s.post("/tokenize", {"content": "The quick brown fox", "add_special": True})
    st, r2 = s.post("/v1/completions", {**body, "prompt": ids["tokens"]})
    check("token-id prompt == text prompt", st == 200 and r2["choices"][0]["text"] == r["choices"][0]["text"], r2)

    # max_tokens and max_completion_tokens → finish_reason length.
    st, r = s.post("/v1/completions", {"prompt": "abc", "max_tokens": 5, "temperature": 0})
    check("max_tokens → length", st == 200 and r["choices"][0]["finish_reason"] == "length"
          and r["usage"]["completion_tokens"] == 5, r)
    st, r = s.post("/v1/chat/completions", chat_body(max_tokens=None, max_completion_tokens=3))
    check("max_completion_tokens", st == 200 and r["usage"]["completion_tokens"] == 3, r)

    # Seeded sampling is reproducible; another seed differs.
    samp = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.0, "top_p": 0.95, "top_k": 40,
            "min_p": 0.01}
    outs = [s.post("/v1/completions", {**samp, "seed": sd})[1]["choices"][0]["text"] for sd in (7, 7, 8)]
    check("seeded sampling reproducible", outs[0] == outs[1], outs)
    check("different seed differs", outs[0] != outs[2], outs)
    st, _, lines = s.stream("/v1/completions", {**samp, "seed": 7})
    check("seeded stream == non-stream", stream_text(chunks_of(lines)[0], chat=False)[0] == outs[0])

    # Stop strings: cut at the first match, never emitted, finish_reason stop (both paths).
    base = {"prompt": "Hello", "max_tokens": 40, "temperature": 0}
    full = s.post("/v1/completions", base)[1]["choices"][0]["text"]
    stop = full[8:11] if len(full) >= 11 else full[-3:]
    want = full[:full.find(stop)]
    st, r = s.post("/v1/completions", {**base, "stop": [stop, "\u2603never"]})
    check("stop string", st == 200 and r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
          (stop, want, r["choices"][0]))
    st, _, lines = s.stream("/v1/completions", {**base, "stop": stop})
    text, _, finish = stream_text(chunks_of(lines)[0], chat=False)
    check("stop string streamed", text == want and finish == "stop", (text, want, finish))

    # Logprobs: chat (bool + top_logprobs) and completions (int).
    st, r = s.post("/v1/chat/completions", chat_body(logprobs=True, top_logprobs=3, max_tokens=8))
    lp = r["choices"][0]["logprobs"]["content"] if st == 200 else []
    shape_ok = len(lp) == r["usage"]["completion_tokens"] and all(
        len(e["top_logprobs"]) == 3 and e["logprob"] <= 0 and isinstance(e["bytes"], list)
        and e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] >= e["top_logprobs"][2]["logprob"]
        and abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-6  # greedy: the chosen token is the top one
        for e in lp)
    check("chat logprobs shape", st == 200 and shape_ok, lp[:2])
    st, _, lines = s.stream("/v1/chat/completions", chat_body(logprobs=True, top_logprobs=3, max_tokens=8))
    slp = [e for c in chunks_of(lines)[0] for e in ((c["choices"][0].get("logprobs") or {}).get("content") or [])]
    check("streamed logprobs == non-streamed", slp == lp, (len(slp), len(lp)))
    st, r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 6, "temperature": 0, "logprobs": 2})
    l = r["choices"][0]["logprobs"]
    check("completions logprobs shape", st == 200 and len(l["tokens"]) == len(l["token_logprobs"])
          == len(l["top_logprobs"]) == len(l["text_offset"]) == 6 and l["text_offset"][0] == 0, l)

    # Tools are accepted (the random model will not call them: tests/server/test_openai.cpp
    # covers the tool-call chunks) and tool_choice none is honoured.
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                              "parameters": {"type": "object",
                                                             "properties": {"city": {"type": "string"}}}}}]
    st, r = s.post("/v1/chat/completions", chat_body(tools=tools))
    st2, r2 = s.post("/v1/chat/completions", chat_body(tools=tools, tool_choice="none"))
    check("tools accepted", st == 200 and st2 == 200, (r, r2))
    st, on = s.post("/apply-template", {"messages": chat_body()["messages"], "tools": tools})
    check("tools reach the template", st == 200 and "get_weather" in on["prompt"], on)
    # Per-request speculation: off.
    st, r = s.post("/v1/chat/completions", chat_body(speculation="none"))
    check("speculation none", st == 200 and r["speculation"]["mode"] == "none" and r["speculation"]["drafted"] == 0
          and r["choices"][0]["message"] == s.post("/v1/chat/completions", chat_body())[1]["choices"][0]["message"], r)
    st, r = s.post("/v1/chat/completions", chat_body(chat_template_kwargs={"enable_thinking": False}))
    check("enable_thinking false", st == 200 and "reasoning_content" not in r["choices"][0]["message"], r)


def expect_error(s, name, status, path, body=None, raw=None, headers=None, param=None, method="POST"):
    st, r = s.request(method, path, body=body, raw=raw, headers=headers)
    err = r.get("error") if isinstance(r, dict) else None
    ok = (st == status and isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"]
          and "type" in err and "code" in err and "param" in err)
    if ok and param is not None:
        ok = err.get("param") == param
    return check(f"error {name}", ok, (st, r))


def test_errors(s):
    p = "/v1/chat/completions"
    expect_error(s, "invalid json", 400, p, raw="{not json")
    expect_error(s, "not an object", 400, p, raw="[1,2]")
    expect_error(s, "invalid utf-8", 400, p, raw=b'{"messages":[{"role":"user","content":"\xff\xfe"}]}')
    expect_error(s, "missing messages", 400, p, body={"max_tokens": 3}, param="messages")
    expect_error(s, "bad role", 400, p, body=chat_body(messages=[{"role": "wizard", "content": "x"}]),
                 param="messages[0].role")
    expect_error(s, "temperature type", 400, p, body=chat_body(temperature="hot"), param="temperature")
    expect_error(s, "temperature range", 400, p, body=chat_body(temperature=5), param="temperature")
    expect_error(s, "max_tokens range", 400, p, body=chat_body(max_tokens=0), param="max_tokens")
    expect_error(s, "n=2", 400, p, body=chat_body(n=2), param="n")
    expect_error(s, "stop list > 4", 400, p, body=chat_body(stop=["a", "b", "c", "d", "e"]), param="stop")
    expect_error(s, "top_logprobs range", 400, p, body=chat_body(logprobs=True, top_logprobs=50), param="top_logprobs")
    expect_error(s, "context exceeded", 400, p, body=chat_body(max_tokens=100000), param="max_tokens")
    expect_error(s, "speculation value", 400, p, body=chat_body(speculation="/etc/passwd"), param="speculation")
    expect_error(s, "token id outside vocabulary", 400, "/v1/completions", body={"prompt": [1, 2, 999999]})
    expect_error(s, "prompt missing", 400, "/v1/completions", body={"max_tokens": 2}, param="prompt")
    expect_error(s, "detokenize bad id", 400, "/detokenize", body={"tokens": [-1]}, param="tokens")
    expect_error(s, "unknown route", 404, "/v1/nothing", body={})
    expect_error(s, "unknown GET route", 404, "/nothing", method="GET")
    expect_error(s, "body too large", 413, p, raw=json.dumps(chat_body(pad="x" * 200000)))
    # Still serving after all that.
    st, _ = s.post(p, chat_body(max_tokens=2))
    check("alive after errors", st == 200)


def test_metrics(s):
    before = s.metrics()
    s.post("/v1/completions", {"prompt": "count me", "max_tokens": 4, "temperature": 0})
    after = s.metrics()
    check("metrics parse", before is not None and after is not None)
    if not after:
        return
    fams, smp = after["families"], after["samples"]
    # Every sample belongs to a family with HELP and TYPE (histogram samples by their base name).
    orphans = []
    for k in smp:
        name = k.split("{")[0]
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        fam = fams.get(name) or fams.get(base)
        if not fam or "HELP" not in fam or "TYPE" not in fam:
            orphans.append(k)
    check("metrics HELP/TYPE", not orphans, orphans[:3])
    for h in ("nemotron:time_to_first_token_seconds", "nemotron:inter_token_latency_seconds"):
        buckets = [(k, v) for k, v in smp.items() if k.startswith(h + "_bucket")]
        vals = [v for _, v in buckets]
        check(f"{h} histogram", fams.get(h, {}).get("TYPE") == "histogram" and buckets
              and vals == sorted(vals) and buckets[-1][0].endswith('le="+Inf"}')
              and vals[-1] == smp.get(h + "_count") and h + "_sum" in smp, buckets[-2:])
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "nemotron:num_requests_waiting",
                 "nemotron:num_requests_running", "nemotron:prompt_tokens_total", "nemotron:prefix_cache_hits_total"):
        check(f"metric {name}", name in smp, name)
    check("per-position metric", any(k.startswith('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"}')
                                     for k in smp), [k for k in smp if "per_pos" in k])
    b, a = before["samples"], after["samples"]
    check("generation tokens counter moves",
          a["nemotron:generation_tokens_total"] >= b["nemotron:generation_tokens_total"] + 4, (b, a))
    key = 'nemotron:http_requests_total{route="/v1/completions",code="200"}'
    check("http counter moves", a.get(key, 0) == b.get(key, 0) + 1, (b.get(key), a.get(key)))
    check("ttft count moves", a["nemotron:time_to_first_token_seconds_count"]
          == b["nemotron:time_to_first_token_seconds_count"] + 1)
    check("drafts counter matches", a["vllm:spec_decode_num_drafts_total"] >= b["vllm:spec_decode_num_drafts_total"])


def test_disconnect(s):
    """Closes the socket after the first chunk of a long stream: the request is cancelled."""
    before = s.metrics()["samples"]
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": "go", "max_tokens": 3000, "temperature": 0, "stream": True,
                       "speculation": "none", "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"data: " not in got:
        d = sock.recv(4096)
        if not d:
            break
        got += d
    sock.close()
    check("disconnect: got a first chunk", b"data: " in got, got[:200])
    deadline = time.time() + 20
    ok = False
    while time.time() < deadline and not ok:
        a = s.metrics()["samples"]
        ok = (a["nemotron:client_disconnects_total"] == before["nemotron:client_disconnects_total"] + 1
              and a['nemotron:request_success_total{finished_reason="cancelled"}']
              == before['nemotron:request_success_total{finished_reason="cancelled"}'] + 1
              and a["nemotron:num_requests_running"] == 0 and a["nemotron:num_requests_waiting"] == 0)
        time.sleep(0.05)
    check("disconnect cancels the request", ok, a)
    # The cancelled request stopped early: far fewer than 3000 tokens were generated.
    gen = a["nemotron:generation_tokens_total"] - before["nemotron:generation_tokens_total"]
    check("disconnect stops generation", gen < 3000, gen)
    st, _ = s.get("/health")
    check("alive after disconnect", st == 200)


def test_auth():
    s = Server("--api-key", "k1,k2", "--api-key", "k3", "--warmup", "800", "-c", "0", wait_ready=True)
    try:
        check("health 503 while loading", any(st == 503 and b == {"status": "loading"} for st, b in s.early_health),
              s.early_health[:2])
        expect_error(s, "401 no key", 401, "/v1/models", method="GET")
        expect_error(s, "401 wrong key", 401, "/v1/chat/completions", body=chat_body(),
                     headers={"Authorization": "Bearer nope"})
        expect_error(s, "401 not bearer", 401, "/v1/models", method="GET", headers={"Authorization": "k1"})
        for k in ("k1", "k2", "k3"):
            st, _ = s.get("/v1/models", headers={"Authorization": f"Bearer {k}"})
            check(f"key {k} accepted", st == 200, st)
        st, r = s.post("/v1/chat/completions", chat_body(max_tokens=2), headers={"Authorization": "Bearer k2"})
        check("authorized chat", st == 200, r)
        st, _ = s.get("/health")
        check("health is public", st == 200)
        expect_error(s, "metrics need the key", 401, "/metrics", method="GET")
    finally:
        check("auth server exits 0", s.stop() == 0)


def test_queue_and_drain():
    s = Server("--max-active", "1", "--max-queue", "1", "-c", "0")
    try:
        long = {"prompt": "long", "max_tokens": 1500, "temperature": 0, "speculation": "none", "ignore_eos": True}
        # Deterministic fill: A is decoding (its first chunk arrived), B is waiting (seen on /metrics);
        # only then must C be refused. Firing all three at once races the worker's admission.
        a = s.conn()
        a.request("POST", "/v1/completions", body=json.dumps({**long, "max_tokens": 100000, "stream": True}),
                  headers={"Content-Type": "application/json"})
        ra = a.getresponse()
        ra.readline()
        results = []
        tb = threading.Thread(target=lambda: results.append(s.post("/v1/completions", long)[0]))
        tb.start()
        waiting = 0
        deadline = time.time() + 30
        while time.time() < deadline:
            waiting = ((s.metrics() or {}).get("samples") or {}).get("nemotron:num_requests_waiting", 0)
            if waiting >= 1:
                break
            time.sleep(0.01)
        check("second request waits", waiting == 1, waiting)
        st_c, _ = s.post("/v1/completions", long)
        a.close()  # disconnect cancels A, so B gets the slot
        tb.join()
        results.append(st_c)
        check("429 when the queue is full", results == [200, 429], results)
        st, body = s.request("POST", "/v1/completions", body=long)
        check("serving after 429", st == 200)

        # Drain: SIGTERM during a stream; it completes, new requests are refused, exit 0.
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({**long, "max_tokens": 6000, "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = r.readline()
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        try:
            st, body = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            refused = st == 503 and "error" in body
        except (ConnectionError, OSError):
            refused = True
        # Still running: the process waits for the stream (it exits only once that is written).
        draining = s.proc.poll() is None
        st, health = s.get("/health") if draining else (None, None)
        check("drain: health says draining", st == 503 and health == {"status": "draining"}, (st, health))
        rest = r.read().decode()
        c.close()
        chunks, done, problems = chunks_of((first.decode() + rest).split("\n"))
        check("drain: new request refused while the stream runs", refused and draining, (refused, draining))
        check("drain: running stream completes", first.startswith(b"data: ") and done == 1 and not problems
              and chunks[-1]["choices"][0]["finish_reason"] == "length", (problems, done))
        rc = s.proc.wait(30)
        check("drain: exit 0", rc == 0, rc)
    finally:
        s.stop()


def main():
    t0 = time.time()
    s = Server("--max-body", "65536")
    try:
        check("startup summary printed", any("ready in" in l for l in s.lines) and
              any(l.startswith("serving on http://") for l in s.lines), s.lines[:20])
        test_routes(s)
        test_generation(s)
        test_errors(s)
        test_metrics(s)
        test_disconnect(s)
    finally:
        check("main server exits 0 on SIGTERM", s.stop() == 0)
    # After the exit: httplib logs a request only after its last byte is sent.
    logs = [l for l in s.lines if l.startswith("access ")]
    check("access log", any('path="/v1/chat/completions" status=200' in l and "completion_tokens=" in l
                            for l in logs) and any("status=404" in l for l in logs), logs[-3:])
    test_auth()
    test_queue_and_drain()
    print(f"test_server: {RESULTS['pass']} passed, {RESULTS['fail']} failed in {time.time() - t0:.1f} s")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
