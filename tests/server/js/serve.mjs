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

// Resolves to {url, proc, output(), stop()} once the server listens; rejects if it exits first
// or does not listen within timeoutMs.
export function startServer(bin, extraArgs = [], timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, ["serve", "--port", "0", ...extraArgs],
                       { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    let done = false;
    const timer = setTimeout(() => {
      if (!done) { done = true; proc.kill("SIGKILL"); reject(new Error("server did not listen in time:\n" + log)); }
    }, timeoutMs);
    const onData = (b) => {
      log += b.toString();
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
      if (m && !done) {
        done = true;
        clearTimeout(timer);
        const url = m[1].replace(/\/$/, "");
        resolve({
          url, proc,
          output: () => log,
          stop: () => new Promise((res) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return res(proc.exitCode);
            proc.once("exit", (code, sig) => res(code ?? sig));
            proc.kill("SIGTERM");
            setTimeout(() => proc.kill("SIGKILL"), 10000).unref();
          }),
        });
      }
    };
    proc.stdout.on("data", onData);
    proc.stderr.on("data", onData);
    proc.on("error", (e) => { if (!done) { done = true; clearTimeout(timer); reject(e); } });
    proc.on("exit", (code, sig) => {
      if (!done) { done = true; clearTimeout(timer); reject(new Error(`server exited (${code ?? sig}) before listening:\n${log}`)); }
    });
  });
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
