// The chat page of `nemotron serve` (src/server/web/index.html) in headless Debian Chromium,
// driven by playwright-core:
//   node tests/server/test_browser.js build/nemotron build/server_chat.png
// Loads /, sends a message, waits for the streamed reply and its stats, shows a server error,
// stops a long reply mid-stream (the UI returns to idle, the server stays healthy), checks the
// page fetched nothing outside the server and threw nothing, and saves a screenshot.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const assert = require("node:assert/strict");

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 30000;

function skip(why) {
  console.error("=".repeat(78));
  console.error("SKIPPED: " + why);
  console.error("Run scripts/install-server-test-deps.sh (apt chromium, npm ci in tests/server/js).");
  console.error("=".repeat(78));
  process.exit(77);
}

// The server's count of client disconnects (GET /metrics), or null when it does not report one.
async function disconnects(url) {
  const r = await fetch(url + "/metrics");
  const m = r.ok && /^nemotron:client_disconnects_total (\d+)$/m.exec(await r.text());
  return m ? Number(m[1]) : null;
}

// Sets the settings fields given, types `text` and clicks Send; returns the new reply's locator.
async function turn(page, text, { temperature, maxTokens, thinking } = {}) {
  if (temperature !== undefined) await page.fill("#temperature", String(temperature));
  if (maxTokens !== undefined) await page.fill("#max-tokens", String(maxTokens));
  if (thinking !== undefined) await page.setChecked("#thinking", thinking);
  const n = await page.locator(".msg.assistant").count();
  await page.fill("#input", text);
  await page.click("#send");
  return page.locator(".msg.assistant").nth(n);
}

async function main() {
  const { nemotronBinary, startServer, importOrSkip } = await import("./js/serve.mjs");
  const bin = nemotronBinary();
  const shot = path.resolve(process.argv[3] || "server_chat.png");
  if (!fs.existsSync(CHROMIUM)) skip(`no Chromium at ${CHROMIUM} (apt package 'chromium')`);
  const { chromium } = await importOrSkip("playwright-core");

  const KEY = "sk-browser-test";
  // --ctx-size 0: no context limit, so the Stop test below can ask for a reply of any length.
  const [server, keyed] = await Promise.all([startServer(bin, ["--ctx-size", "0"]), startServer(bin, ["--api-key", KEY])]);
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu"],
  });
  const problems = [];
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  try {
    page.setDefaultTimeout(STEP_MS);
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    page.on("console", (m) => {
      // Chromium logs every non-2xx fetch ("Failed to load resource"): the 400/401 below are expected.
      if (m.type() === "error" && !/Failed to load resource.*40[01]/.test(m.text())) problems.push("console error: " + m.text());
    });
    page.on("request", (r) => {
      if (!r.url().startsWith(server.url + "/") && !r.url().startsWith(keyed.url + "/")) {
        problems.push("request outside the server: " + r.url());
      }
    });

    // --- the page loads, idle, with the model name from /v1/models
    const resp = await page.goto(server.url + "/");
    assert.equal(resp.status(), 200, "GET / status");
    assert.match(resp.headers()["content-type"] || "", /text\/html/);
    for (const id of ["#input", "#send", "#stop", "#messages", "#api-key", "#temperature", "#max-tokens", "#thinking"]) {
      assert.equal(await page.locator(id).count(), 1, `one ${id}`);
    }
    assert.equal(await page.getAttribute("body", "data-state"), "idle");
    assert.equal(await page.isDisabled("#stop"), true, "Stop disabled when idle");
    await page.waitForFunction(() => !/…|unreachable|models:/.test(document.getElementById("model-name").textContent));

    // --- a short reply, thinking off: content streams in, then the stats line
    const first = await turn(page, "Hello! Who are you?", { temperature: 0, maxTokens: 24, thinking: false });
    await first.locator(".content").waitFor();
    await page.waitForFunction(() => {
      const c = document.querySelector(".msg.assistant .content");
      return c && c.textContent.length > 0;
    });
    await first.locator(".stats").waitFor();
    const stats1 = await first.locator(".stats").textContent();
    assert.match(stats1, /\d+ prompt · \d+ generated/, "stats from usage: " + stats1);
    assert.match(stats1, /tok\/s|TTFT/, "speed in stats: " + stats1);
    assert.equal(await page.getAttribute("body", "data-state"), "idle");
    assert.equal(await page.locator(".msg.user").count(), 1);
    assert.equal(await page.locator(".msg.assistant").count(), 1);
    assert.equal(await first.locator(".error").count(), 0);
    console.log("reply 1:", JSON.stringify((await first.locator(".content").textContent()).slice(0, 60)), "|", stats1);

    // --- thinking on: any reasoning shows folded (a closed <details>)
    const second = await turn(page, "Think about it.", { maxTokens: 16, thinking: true });
    await second.locator(".stats").waitFor();
    const folded = await second.locator("details.reasoning").count();
    if (folded) {
      assert.equal(await second.locator("details.reasoning").evaluate((d) => d.open), false, "reasoning folded");
    } else {
      assert.equal(await second.locator(".content").count(), 1, "no reasoning: then content");
    }
    console.log("reply 2: reasoning", folded ? "folded" : "absent", "|", await second.locator(".stats").textContent());

    // --- a bad request: the server's 400 shows as a readable error, the turn is dropped
    const third = await turn(page, "This request is invalid.", { temperature: -1 });
    await third.locator(".error").waitFor();
    const err = await third.locator(".error").textContent();
    assert.match(err, /^Error 400 bad request: .*temperature/i, "readable error: " + err);
    assert.equal(await page.getAttribute("body", "data-state"), "idle");
    console.log("error shown:", err);

    // Screenshot: a reply with stats, a folded reasoning, an error.
    await page.screenshot({ path: shot, fullPage: true });
    const png = fs.readFileSync(shot);
    assert.equal(png.subarray(1, 4).toString(), "PNG", "a PNG file");
    assert.ok(png.length > 10000, `screenshot non-trivial: ${png.length} bytes`);
    console.log(`screenshot: ${shot} (${png.length} bytes)`);

    // --- Stop during a long reply: the UI returns to idle, the server cancels and stays healthy.
    // The tiny model soon samples its end-of-turn token: the request gets the server's
    // ignore_eos on its way (the page itself never sends it), and a budget of 100000 tokens
    // (minutes even at ~900 tok/s), so the reply is still running when Stop is clicked however
    // fast the engine or slow the browser.
    await page.route("**/v1/chat/completions", (route) => {
      const body = JSON.parse(route.request().postData());
      route.continue({ postData: JSON.stringify({ ...body, ignore_eos: true, max_tokens: 100000 }) });
    });
    const before = await disconnects(server.url);
    await page.click("#clear");
    const fourth = await turn(page, "Tell me a very long story.", { temperature: 0, maxTokens: 3000, thinking: false });
    await page.waitForFunction(() => {
      const m = document.querySelectorAll(".msg.assistant")[0];
      const c = m && m.querySelector(".content");
      return c && c.textContent.length > 20;
    });
    assert.equal(await page.getAttribute("body", "data-state"), "busy",
                 "the long reply ended before Stop could be clicked: the test needs a longer reply");
    assert.equal(await page.isEnabled("#stop"), true, "Stop enabled while busy");
    await page.click("#stop");
    await page.waitForFunction(() => document.body.dataset.state === "idle", null, { timeout: 5000 });
    assert.equal(await fourth.locator(".note").textContent(), "(stopped)");
    assert.equal(await page.isDisabled("#stop"), true);
    assert.equal(await page.isEnabled("#send"), true);
    const stoppedLen = (await fourth.locator(".content").textContent()).length;
    await page.waitForTimeout(500);
    assert.equal((await fourth.locator(".content").textContent()).length, stoppedLen, "no text after Stop");
    await page.unroute("**/v1/chat/completions");
    const health = await fetch(server.url + "/health");
    assert.equal(health.status, 200, "/health after Stop");
    if (before !== null) {  // the server saw the disconnect (GET /metrics)
      let after = before;
      for (let i = 0; i < 40 && after === before; i++) {
        await page.waitForTimeout(50);
        after = await disconnects(server.url);
      }
      assert.equal(after, before + 1, "the server counted the Stop as a client disconnect");
    } else {
      console.log("note: /metrics has no client_disconnects_total; server-side cancel not checked");
    }

    // --- the conversation goes on after Stop (history, including the stopped reply, is sent back)
    const fifth = await turn(page, "And then?", { maxTokens: 8 });
    await fifth.locator(".stats").waitFor();
    assert.equal(await fifth.locator(".error").count(), 0);
    assert.equal(await page.locator(".msg.user").count(), 2);

    // --- settings persist in localStorage (the API key field included)
    await page.fill("#api-key", "");
    await page.reload();
    assert.equal(await page.inputValue("#max-tokens"), "8");
    assert.equal(await page.isChecked("#thinking"), false);

    // --- a server with --api-key: 401 shown until the key is entered, then the Bearer key works
    await page.goto(keyed.url + "/");
    await page.waitForFunction(() => /401/.test(document.getElementById("model-name").textContent));
    const denied = await turn(page, "Hello?", { temperature: 0, maxTokens: 8 });
    await denied.locator(".error").waitFor();
    assert.match(await denied.locator(".error").textContent(), /^Error 401 unauthorized/);
    await page.fill("#api-key", KEY);
    await page.locator("#api-key").dispatchEvent("change");
    await page.waitForFunction(() => !/401|…/.test(document.getElementById("model-name").textContent));
    const allowed = await turn(page, "Hello?");
    await allowed.locator(".stats").waitFor();
    assert.equal(await allowed.locator(".error").count(), 0);
    assert.equal(await page.evaluate(() => localStorage.getItem("nemotron.apiKey")), KEY, "key kept in localStorage");

    assert.deepEqual(problems, [], "no page errors, no outside requests");
    assert.equal((await fetch(server.url + "/health")).status, 200);
  } catch (e) {
    // What the page showed when it failed.
    const failShot = shot.replace(/\.png$/, "") + "-failed.png";
    await page.screenshot({ path: failShot }).catch(() => {});
    console.error(`page at the failure: ${failShot}\n` +
                  (await page.locator("#messages").innerText().catch(() => "?")).slice(-2000));
    throw e;
  } finally {
    await browser.close();
    await Promise.all([server.stop(), keyed.stop()]);
  }
  console.log("browser test: ok");
}

main().catch((e) => {
  console.error("browser test FAILED:", e && e.stack || e);
  process.exit(1);
});
