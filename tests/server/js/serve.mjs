// Starts `nemotron serve --port 0 …` for the JS tests and parses the address it prints
// ("listening on http://HOST:PORT"). Without --model the server runs its embedded tiny model.
import { spawn } from "node:child_process";

export function nemotronBinary() {
  const bin = process.env.NEMOTRON_BIN || process.argv[2];
  if (!bin) {
    console.error("usage: node TEST.mjs PATH/TO/nemotron   (or NEMOTRON_BIN=…)");
    process.exit(2);
  }
  return bin;
}

// Resolves to {url, proc, output(), stop()} once the server is ready; rejects if it exits first
// or is not ready within timeoutMs. It prints its address when it listens, and /health turns
// 200 after its warm-up.
export async function startServer(bin, extraArgs = [], timeoutMs = 60000) {
  const proc = spawn(bin, ["serve", "--port", "0", ...extraArgs], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const deadline = Date.now() + timeoutMs;
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not listen in time:\n" + log)), timeoutMs);
    const onData = (b) => {
      log += b.toString();
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1].replace(/\/$/, "")); }
    };
    proc.stdout.on("data", onData);
    proc.stderr.on("data", onData);
    proc.on("error", (e) => { clearTimeout(timer); reject(e); });
    proc.on("exit", (code, sig) => { clearTimeout(timer); reject(new Error(`server exited (${code ?? sig}):\n${log}`)); });
  }).catch((e) => { proc.kill("SIGKILL"); throw e; });
  for (;;) {
    try { if ((await fetch(url + "/health")).status === 200) break; } catch (_) {}
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error("server not healthy in time:\n" + log);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const stop = () => new Promise((res) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return res(proc.exitCode ?? proc.signalCode);
    proc.once("exit", (code, sig) => res(code ?? sig));
    proc.kill("SIGTERM");
    setTimeout(() => proc.kill("SIGKILL"), 10000).unref();
  });
  return { url, proc, output: () => log, stop };
}

// Exit 77 (ctest SKIP_RETURN_CODE) with a loud message when the npm test dependencies are missing.
export async function importOrSkip(name) {
  try {
    return await import(name);
  } catch (e) {
    console.error("=".repeat(78));
    console.error(`SKIPPED: npm package '${name}' is not installed (${e.code || e.message}).`);
    console.error("Run scripts/install-server-test-deps.sh (npm ci in tests/server/js).");
    console.error("=".repeat(78));
    process.exit(77);
  }
}
