// `nemotron serve` through the real, unmodified OpenAI JS SDK (node:test).
//   node tests/server/js/test_sdk.mjs build/nemotron
// Starts the binary on port 0 with its embedded tiny model (gibberish text: the checks are on
// structure, counts and determinism, not on content), plus a second instance with --api-key.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { nemotronBinary, startServer, importOrSkip } from "./serve.mjs";

const { default: OpenAI } = await importOrSkip("openai");
const bin = nemotronBinary();
const KEY = "sk-test-right-key";
let server, keyed, client, model;

before(async () => {
  [server, keyed] = await Promise.all([startServer(bin), startServer(bin, ["--api-key", KEY])]);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 30000 });
});
after(async () => {
  await Promise.all([server?.stop(), keyed?.stop()]);
});

const MESSAGES = [{ role: "user", content: "Write a short poem about the sea." }];
const isCount = (x) => Number.isInteger(x) && x >= 0;

async function health(url) {
  const r = await fetch(url + "/health");
  return r.status;
}

test("models.list: one model with an id, object 'model'", async () => {
  const page = await client.models.list();
  const ids = [];
  for await (const m of page) {
    assert.equal(m.object, "model");
    assert.equal(typeof m.id, "string");
    assert.ok(m.id.length > 0);
    ids.push(m.id);
  }
  assert.ok(ids.length >= 1, "at least one model");
  model = ids[0];
});

test("chat.completions non-streaming vs streaming: same greedy text, usage counts", async () => {
  const req = { model, messages: MESSAGES, temperature: 0, max_tokens: 24 };
  const r = await client.chat.completions.create(req);
  assert.equal(r.object, "chat.completion");
  assert.equal(typeof r.id, "string");
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, "assistant");
  assert.equal(typeof c.message.content, "string");
  assert.ok(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assert.ok(isCount(r.usage.prompt_tokens) && r.usage.prompt_tokens > 0, "prompt_tokens");
  assert.ok(isCount(r.usage.completion_tokens) && r.usage.completion_tokens > 0, "completion_tokens");
  assert.ok(r.usage.completion_tokens <= 24, "max_tokens honoured");
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

  // Same request streamed: the SDK's async iterator over chunks.
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", reasoning = "", chunks = 0, finishes = [], usage = null;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? "";
      reasoning += ch.delta?.reasoning_content ?? "";
      if (ch.finish_reason) finishes.push(ch.finish_reason);
    }
  }
  assert.ok(chunks >= 2, `chunks: ${chunks}`);
  assert.equal(finishes.length, 1, `exactly one finish_reason, got ${finishes}`);
  assert.equal(finishes[0], c.finish_reason);
  // The non-streamed reply splits reasoning off into reasoning_content the same way.
  assert.equal(text, c.message.content, "streamed content == non-streamed content (temperature 0)");
  assert.equal(reasoning, c.message.reasoning_content ?? "");
  assert.ok(usage, "include_usage: a final chunk with usage");
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, r.usage.prompt_tokens);
});

test("completions (prompt string): non-streaming and streaming agree", async () => {
  const req = { model, prompt: "Once upon a time", temperature: 0, max_tokens: 16 };
  const r = await client.completions.create(req);
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 16);

  const stream = await client.completions.create({ ...req, stream: true });
  let text = "", chunks = 0, finishes = 0;
  for await (const chunk of stream) {
    chunks++;
    for (const ch of chunk.choices) {
      text += ch.text ?? "";
      if (ch.finish_reason) finishes++;
    }
  }
  assert.ok(chunks >= 2, `chunks: ${chunks}`);
  assert.equal(finishes, 1);
  assert.equal(text, r.choices[0].text);
});

test("bad requests: APIError with status 400", async () => {
  for (const bad of [{ temperature: -1 }, { n: 2 }, { max_tokens: -5 }]) {
    await assert.rejects(
      client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4, ...bad }),
      (e) => {
        assert.ok(e instanceof OpenAI.APIError, `APIError for ${JSON.stringify(bad)}: ${e}`);
        assert.equal(e.status, 400, `status for ${JSON.stringify(bad)}`);
        assert.equal(typeof e.message, "string");
        return true;
      });
  }
  await assert.rejects(client.chat.completions.create({ model, messages: "not a list" }),
                       (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

test("--api-key: wrong key is 401 (AuthenticationError), right key works", async () => {
  const wrong = new OpenAI({ baseURL: keyed.url + "/v1", apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4 }),
                       (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  const right = new OpenAI({ baseURL: keyed.url + "/v1", apiKey: KEY, maxRetries: 0 });
  const r = await right.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4 });
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].message.content, "string");
});

test("tools are accepted; the response has a valid shape", async () => {
  const tools = [{
    type: "function",
    function: {
      name: "get_weather", description: "Current weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  }];
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, tool_choice: "auto",
    temperature: 0, max_tokens: 16,
  });
  assert.equal(r.choices.length, 1);
  const m = r.choices[0].message;
  assert.equal(m.role, "assistant");
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  if (m.tool_calls && m.tool_calls.length) {
    for (const tc of m.tool_calls) {
      assert.equal(tc.type, "function");
      assert.equal(typeof tc.function.name, "string");
      assert.equal(typeof tc.function.arguments, "string");
    }
  } else {
    assert.equal(typeof m.content, "string");
  }
  // Streamed with tools too.
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, max_tokens: 8, stream: true,
  });
  let finishes = 0;
  for await (const chunk of stream) for (const ch of chunk.choices) if (ch.finish_reason) finishes++;
  assert.equal(finishes, 1);
});

test("abort mid-stream (AbortController): server stays healthy and keeps serving", async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: MESSAGES, max_tokens: 2000, ignore_eos: true, stream: true, temperature: 0.7 },
    { signal: ac.signal });
  // The SDK ends the iteration quietly on an abort (or throws APIUserAbortError), after at most
  // the chunks already read off the socket: the reply never reaches its finish_reason.
  let chunks = 0, finished = false;
  try {
    for await (const chunk of stream) {
      if (++chunks === 3) ac.abort();
      if (chunk.choices.some((c) => c.finish_reason)) finished = true;
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", `abort error: ${e}`);
  }
  assert.ok(ac.signal.aborted);
  assert.ok(chunks >= 3 && chunks < 100, `chunks: ${chunks}`);
  assert.equal(finished, false, "aborted before the end of the 2000-token reply");
  assert.equal(await health(server.url), 200);
  const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4 });
  assert.equal(r.choices.length, 1);
  assert.equal(await health(server.url), 200);
  assert.equal(server.proc.exitCode, null, "server still running");
});
