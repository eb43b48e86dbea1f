#!/usr/bin/env python3
"""Named models and the default model: with a models directory (NEMOTRON_MODELS, else
<executable>/../models) holding tiny-code and its drafters tiny-code-dflash / tiny-code-dspark,
a command without --model uses tiny-code, --model / --draft take names, --spec dflash|dspark
without --draft loads the sibling drafter, and an unknown name is an error listing the names.
Without tiny-code the embedded tiny-a is used, exactly as before."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from clitest import CliTest  # noqa: E402

T = CliTest(sys.argv[1], "models dir")
check, must = T.check, T.must


def env_with(models):
    e = {k: v for k, v in os.environ.items() if k != "NEMOTRON_MODELS"}
    if models is not None:
        e["NEMOTRON_MODELS"] = models
    return e


with tempfile.TemporaryDirectory() as d:
    models = os.path.join(d, "models")
    code = os.path.join(models, "tiny-code")
    must(["synth", "--preset", "tiny-q", "--format", "modelopt", "--seed", "5", "--out", code, "--quiet"])
    for kind in ("dflash", "dspark"):
        must(["synth", "--preset", "tiny-q", "--drafter", kind, "--seed", "5", "--out", f"{code}-{kind}", "--quiet"])
    E = env_with(models)
    run = lambda args, env=E: T.run(args, env=env)
    ids = ["--ids", "4,5,6,4,5,6", "-n", "12"]

    # No --model: tiny-code, named on stderr and by inspect; the same tokens as the path.
    r = run(["inspect"])
    check("inspect default names the path", r.returncode == 0 and f"checkpoint   {code} (target)" in r.stdout,
          r.stdout + r.stderr)
    by_path = T.run(["run", "-m", code] + ids).stdout
    r = run(["run"] + ids)
    check("run default is tiny-code", r.returncode == 0 and r.stdout == by_path and
          f"note: using the default model {code}" in r.stderr, f"{r.stdout!r} vs {by_path!r} / {r.stderr}")
    r = run(["run", "--model", "tiny-code"] + ids)
    check("--model NAME", r.returncode == 0 and r.stdout == by_path, r.stderr)

    # --spec dflash|dspark without --draft: the sibling drafter, lossless.
    for kind in ("dflash", "dspark"):
        for model in ([], ["--model", "tiny-code"]):
            r = run(["run", "--spec", kind, "--spec-stats"] + model + ids)
            check(f"--spec {kind} {model} loads the sibling", r.returncode == 0 and r.stdout == by_path and
                  f"using the drafter {code}-{kind}" in r.stderr and f"drafter {kind}" in r.stderr, r.stderr)
    r = run(["run", "--draft", "tiny-code-dspark", "--spec-stats"] + ids)
    check("--draft NAME", r.returncode == 0 and r.stdout == by_path and "drafter dspark" in r.stderr, r.stderr)
    r = run(["inspect", "tiny-code", "--draft", "tiny-code-dflash"])
    check("inspect NAME --draft NAME", r.returncode == 0 and "tiny-code-dflash" in r.stdout, r.stdout + r.stderr)
    r = run(["bench", "--model", "tiny-code", "--prompt-tokens", "4", "--gen", "2", "--json"])
    check("bench --model NAME", r.returncode == 0 and json.loads(r.stdout)["model"] == code, r.stdout + r.stderr)
    r = run(["chat", "--spec", "dflash", "--message", "hi", "-n", "4"])
    check("chat default + sibling drafter", r.returncode == 0 and f"using the drafter {code}-dflash" in r.stderr,
          r.stderr)

    # Errors name what was tried and what the models directory holds.
    T.expect_error("unknown name", ["run", "--model", "nope", "--ids", "1"],
                   [f"--model nope: no directory nope nor {models}/nope",
                    "available: tiny-code, tiny-code-dflash, tiny-code-dspark"], env=E)
    T.expect_error("unknown drafter name", ["run", "--draft", "nope-dflash", "--ids", "1"],
                   ["--draft nope-dflash:", "available: tiny-code,"], env=E)
    T.expect_error("a path is not a name", ["run", "--model", os.path.join(d, "nope"), "--ids", "1"],
                   ["config.json: cannot open"], env=E)
    # A model given as a path has no siblings: the error of before.
    T.expect_error("path model, no drafter", ["run", "-m", code, "--spec", "dflash", "--ids", "1"],
                   ["needs a drafter: --draft DIR"], env=E)
    lone = os.path.join(d, "lone")
    os.makedirs(lone)
    os.symlink(code, os.path.join(lone, "tiny-code"))
    T.expect_error("missing sibling", ["run", "--spec", "dspark", "--ids", "1"],
                   [f"--spec dspark needs a drafter", f"{lone}/tiny-code-dspark", "available: tiny-code"],
                   env=env_with(lone))

    # serve without --model: /props names tiny-code and the sibling drafter.
    p = subprocess.Popen([T.binary, "serve", "--port", "0", "-t", "1", "--spec", "dflash", "--warmup", "1"],
                         stderr=subprocess.PIPE, text=True, env=E)
    try:
        url, props = None, {}
        for line in p.stderr:
            m = re.match(r"listening on (http://\S+)", line)
            url = m.group(1) if m else url
            if line.startswith("serving on"):
                props = json.load(urllib.request.urlopen(url + "/props", timeout=30))
                break
        check("serve default model", props.get("model_path") == code and props.get("drafter") == code + "-dflash",
              props)
    finally:
        p.terminate()
        p.wait(timeout=60)

    # No tiny-code: the embedded tiny-a, as before (same tokens as synth tiny-a seed 0).
    tiny_a = os.path.join(d, "tiny-a")
    must(["synth", "--preset", "tiny-a", "--out", tiny_a, "--quiet"])
    want = T.run(["run", "-m", tiny_a] + ids).stdout
    for name, env in (("empty", env_with(os.path.join(d, "empty"))), ("missing", env_with(os.path.join(d, "no")))):
        if name == "empty":
            os.makedirs(os.path.join(d, "empty"))
        r = run(["run"] + ids, env=env)
        check(f"{name} models dir: embedded tiny-a", r.returncode == 0 and r.stdout == want and
              "note: using the embedded tiny model (tiny-a, seed 0)" in r.stderr, r.stderr)

    # Without NEMOTRON_MODELS: <executable>/../models.
    os.makedirs(os.path.join(d, "bin"))
    exe = os.path.join(d, "bin", "nemotron")
    shutil.copy(T.binary, exe)
    r = subprocess.run([exe, "run"] + ids, capture_output=True, text=True, env=env_with(None), timeout=300)
    check("<executable>/../models", r.returncode == 0 and r.stdout == by_path and code in r.stderr, r.stderr)

T.finish()
