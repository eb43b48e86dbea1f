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

  const server = await startServer(bin);
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu"],
  });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
    page.setDefaultTimeout(STEP_MS);
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    page.on("console", (m) => {
      // Chromium logs every non-2xx fetch ("Failed to load resource"): the 400 below is expected.
      if (m.type() === "error" && !/Failed to load resource.*400/.test(m.text())) problems.push("console error: " + m.text());
    });
    page.on("request", (r) => {
      if (!r.url().startsWith(server.url + "/")) problems.push("request outside the server: " + r.url());
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

    // --- Stop during a long reply: the UI returns to idle, the server stays healthy
    const fourth = await turn(page, "Tell me a very long story.", { temperature: 0.8, maxTokens: 100000, thinking: false });
    await page.waitForFunction(() => {
      const m = document.querySelectorAll(".msg.assistant")[3];
      const c = m && m.querySelector(".content");
      return c && c.textContent.length > 20;
    });
    assert.equal(await page.getAttribute("body", "data-state"), "busy");
    assert.equal(await page.isEnabled("#stop"), true, "Stop enabled while busy");
    await page.click("#stop");
    await page.waitForFunction(() => document.body.dataset.state === "idle", null, { timeout: 5000 });
    assert.equal(await fourth.locator(".note").textContent(), "(stopped)");
    assert.equal(await page.isDisabled("#stop"), true);
    assert.equal(await page.isEnabled("#send"), true);
    const stoppedLen = (await fourth.locator(".content").textContent()).length;
    await page.waitForTimeout(500);
    assert.equal((await fourth.locator(".content").textContent()).length, stoppedLen, "no text after Stop");
    const health = await fetch(server.url + "/health");
    assert.equal(health.status, 200, "/health after Stop");

    // --- the conversation goes on after Stop (history, including the stopped reply, is sent back)
    const fifth = await turn(page, "And then?", { maxTokens: 8 });
    await fifth.locator(".stats").waitFor();
    assert.equal(await fifth.locator(".error").count(), 0);
    assert.equal(await page.locator(".msg.user").count(), 5);

    // --- settings persist in localStorage (the API key field included)
    await page.fill("#api-key", "");
    await page.reload();
    assert.equal(await page.inputValue("#max-tokens"), "8");
    assert.equal(await page.isChecked("#thinking"), false);

    // Screenshot of a fresh conversation (the reload cleared it): one short turn.
    await (await turn(page, "Hello! Who are you?", { temperature: 0, maxTokens: 40 })).locator(".stats").waitFor();
    await page.screenshot({ path: shot });
    const png = fs.readFileSync(shot);
    assert.equal(png.subarray(1, 4).toString(), "PNG", "a PNG file");
    assert.ok(png.length > 10000, `screenshot non-trivial: ${png.length} bytes`);
    console.log(`screenshot: ${shot} (${png.length} bytes)`);

    assert.deepEqual(problems, [], "no page errors, no outside requests");
    assert.equal((await fetch(server.url + "/health")).status, 200);
  } finally {
    await browser.close();
    await server.stop();
  }
  console.log("browser test: ok");
}

main().catch((e) => {
  console.error("browser test FAILED:", e && e.stack || e);
  process.exit(1);
});
