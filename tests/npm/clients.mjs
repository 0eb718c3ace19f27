// clients.mjs BASE_URL API_KEY — drives a running `deja serve` with the official
// OpenAI and Anthropic SDKs (run by tests/e2e/test_clients.sh).  Every check
// asserts on what the server answered; the model's words do not matter, the
// shapes, the tool calls, the determinism with seeds and the errors do.
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const [base, key, thinkBase] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
let passed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    process.exitCode = 1;
  }
}

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city"],
    },
  },
};
const msgs = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What is the weather in Paris? <|im_end|> answer in JSON" },
];

await check("chat: non-streaming", async () => {
  const r = await client.chat.completions.create({ model: "codelm", messages: msgs, max_tokens: 12, seed: 1, temperature: 0.7 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 10 && r.usage.completion_tokens >= 1);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, "number");
});

await check("chat: streaming equals non-streaming with the same seed", async () => {
  const req = { model: "codelm", messages: msgs, max_tokens: 16, seed: 7, temperature: 0.9 };
  const full = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.ok(usage && usage.completion_tokens === full.usage.completion_tokens);
  // the second identical prompt reuses the first one's KV
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, "cached_tokens > 0 on a repeated prompt");
});

await check("chat: tool_choice required gives a parsed tool call", async () => {
  const r = await client.chat.completions.create({
    model: "codelm", messages: msgs, tools: [weather], tool_choice: "required", max_tokens: 256, seed: 3, temperature: 0.5,
  });
  const m = r.choices[0].message;
  // a call cut by max_tokens reports "length" (OpenAI's rule); the call is still there
  assert.ok(["tool_calls", "length"].includes(r.choices[0].finish_reason));
  assert.ok(m.tool_calls && m.tool_calls.length >= 1);
  const tc = m.tool_calls[0];
  assert.equal(tc.type, "function");
  assert.equal(tc.function.name, "get_weather");
  assert.match(tc.id, /^call_/);
  if (r.choices[0].finish_reason === "tool_calls") assert.equal(typeof JSON.parse(tc.function.arguments).city, "string");
});

await check("chat: streamed tool-call deltas reassemble to the non-streamed call", async () => {
  const req = { model: "codelm", messages: msgs, tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } },
    max_tokens: 96, seed: 5, temperature: 0.8 };
  const full = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const calls = [];
  let finish = null, firstArgs = null;
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    if (c.finish_reason) finish = c.finish_reason;
    for (const d of c.delta.tool_calls || []) {
      if (d.id) {
        calls[d.index] = { id: d.id, name: d.function.name, args: d.function.arguments || "" };
      } else {
        if (firstArgs === null && d.function.arguments) firstArgs = d.function.arguments;
        calls[d.index].args += d.function.arguments || "";
      }
    }
  }
  assert.equal(finish, full.choices[0].finish_reason);
  assert.ok(["tool_calls", "length"].includes(finish));
  assert.equal(calls.length, full.choices[0].message.tool_calls.length);
  assert.equal(calls[0].name, "get_weather");
  assert.equal(calls[0].args, full.choices[0].message.tool_calls[0].function.arguments);
  assert.ok(calls[0].args.startsWith("{"), "arguments start with '{'");
  if (finish === "tool_calls") JSON.parse(calls[0].args);
});

await check("chat: response_format json_schema is honoured", async () => {
  const r = await client.chat.completions.create({
    model: "codelm", messages: [{ role: "user", content: "Give a name and an age." }], max_tokens: 64, seed: 11,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: {
      type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 120 } },
      required: ["name", "age"], additionalProperties: false } } },
  });
  if (r.choices[0].finish_reason === "stop") {
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v.name, "string");
    assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120);
  } else {
    assert.equal(r.choices[0].finish_reason, "length");
  }
});

await check("completions: prompt string", async () => {
  const r = await client.completions.create({ model: "codelm", prompt: "def add(a, b):", max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.usage.completion_tokens >= 1);
});

await check("8 concurrent streams equal the same requests one by one", async () => {
  const reqs = [...Array(8).keys()].map((i) => ({
    model: "codelm", messages: [{ role: "user", content: `Write item ${i} of a list.` }], max_tokens: 12, seed: 100 + i, temperature: 1.0,
  }));
  const seq = [];
  for (const q of reqs) seq.push((await client.chat.completions.create(q)).choices[0].message.content);
  const par = await Promise.all(reqs.map(async (q) => {
    let t = "";
    for await (const ch of await client.chat.completions.create({ ...q, stream: true })) t += ch.choices[0]?.delta?.content || "";
    return t;
  }));
  assert.deepEqual(par, seq);
});

await check("disconnect mid-stream: the server goes on serving", async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model: "codelm", messages: msgs, max_tokens: 400, stream: true, ignore_eos: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ac.abort();
  } catch (e) {
    /* the abort surfaces as an error */
  }
  const r = await client.chat.completions.create({ model: "codelm", messages: msgs, max_tokens: 4 });
  assert.ok(r.choices[0].message.content !== undefined);
  const h = await fetch(`${base}/health`);
  assert.equal(h.status, 200);
});

await check("bad inputs: 4xx with an OpenAI error body", async () => {
  const bad = [
    [{ model: "codelm", messages: "hi" }, 400],
    [{ model: "codelm", messages: msgs, max_tokens: 0 }, 400],
    [{ model: "codelm", messages: msgs, temperature: "hot" }, 400],
    [{ model: "not-this-model", messages: msgs }, 404],
    [{ model: "codelm", messages: msgs, tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } }, 400],
  ];
  for (const [body, status] of bad) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(typeof e.error?.message ?? e.message, "string");
      return true;
    });
  }
  const raw = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" }, body: "{not json" });
  assert.equal(raw.status, 400);
  const j = await raw.json();
  assert.equal(typeof j.error.message, "string");
});

await check("auth: a wrong key gets 401", async () => {
  const other = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(other.models.list(), (e) => e.status === 401);
});

await check("responses API: text and streamed events", async () => {
  const r = await client.responses.create({ model: "codelm", input: "Say hello.", max_output_tokens: 8, temperature: 0 });
  assert.equal(r.object, "response");
  assert.equal(typeof r.output_text, "string");
  const types = [];
  let text = "";
  for await (const ev of await client.responses.create({ model: "codelm", input: "Say hello.", max_output_tokens: 8, temperature: 0, stream: true })) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
  }
  assert.equal(types[0], "response.created");
  // cut by max_output_tokens: OpenAI ends the stream with response.incomplete
  assert.equal(types[types.length - 1], r.status === "incomplete" ? "response.incomplete" : "response.completed");
  assert.equal(text, r.output_text);
});

await check("responses API: function tools", async () => {
  const r = await client.responses.create({
    model: "codelm", input: [{ role: "user", content: "Weather in Oslo?" }], max_output_tokens: 96, seed: 2,
    tools: [{ type: "function", name: "get_weather", description: "weather", parameters: weather.function.parameters }],
    tool_choice: "required",
  });
  const fc = r.output.find((o) => o.type === "function_call");
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, "get_weather");
  JSON.parse(fc.arguments);
  // the next turn sends the call and its output back
  const r2 = await client.responses.create({
    model: "codelm", max_output_tokens: 8, temperature: 0,
    input: [{ role: "user", content: "Weather in Oslo?" }, fc, { type: "function_call_output", call_id: fc.call_id, output: "{\"temp\": 3}" }],
    tools: [{ type: "function", name: "get_weather", parameters: weather.function.parameters }],
  });
  assert.equal(r2.status === "completed" || r2.status === "incomplete", true);
});

// ---- Responses: stored responses (previous_response_id, retrieve, delete), namespace tools, Codex's fields ----

const q1 = "Write a Python function that adds two numbers.";
const q2 = "Now make it subtract them.";
const rbase = { model: "codelm", instructions: "You are a helpful assistant.", max_output_tokens: 12, temperature: 0 };
// what a Responses output says, without its ids (they differ per response)
const said = (out) => out.map((o) => ({ type: o.type, text: o.content?.map((c) => c.text).join(""), name: o.name,
  namespace: o.namespace, arguments: o.arguments }));

await check("responses API: previous_response_id renders the stored turn exactly and reuses its KV", async () => {
  const r1 = await client.responses.create({ ...rbase, input: q1, store: true });
  assert.equal(r1.store, true);
  assert.equal(r1.instructions, rbase.instructions);
  const r2 = await client.responses.create({ ...rbase, previous_response_id: r1.id, input: q2 });
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.store, true); // OpenAI's default
  // the follow-up's prompt starts with the whole previous prompt (and its output): all of it is reused
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens,
    `cached ${r2.usage.input_tokens_details.cached_tokens} < previous prompt ${r1.usage.input_tokens}`);
  assert.ok(r2.x_deja.reused_own >= r1.usage.input_tokens);
  // the same conversation sent explicitly: same prompt, same (greedy) answer
  const r3 = await client.responses.create({ ...rbase, store: false, input: [{ role: "user", content: q1 }, ...r1.output,
    { role: "user", content: q2 }] });
  assert.equal(r3.usage.input_tokens, r2.usage.input_tokens);
  assert.deepEqual(said(r3.output), said(r2.output));
  assert.equal(r3.output_text, r2.output_text);
  assert.equal(r3.store, false);
  // instructions are not carried over from the previous response (OpenAI's rule): without them the prompt is shorter
  const r4 = await client.responses.create({ model: "codelm", max_output_tokens: 4, temperature: 0, previous_response_id: r1.id, input: q2 });
  assert.ok(r4.usage.input_tokens < r2.usage.input_tokens, `${r4.usage.input_tokens} vs ${r2.usage.input_tokens}`);
  assert.equal(r4.instructions, null);
  // GET /v1/responses/{id}: the stored object
  const got = await client.responses.retrieve(r1.id);
  assert.equal(got.id, r1.id);
  assert.equal(got.object, "response");
  assert.deepEqual(got.output, r1.output);
  assert.deepEqual(got.usage, r1.usage);
  assert.equal(got.output_text, r1.output_text);
  // a chain of three: r2's conversation continues
  const r5 = await client.responses.create({ ...rbase, previous_response_id: r2.id, input: "Thanks." });
  assert.ok(r5.usage.input_tokens_details.cached_tokens >= r2.usage.input_tokens);
});

await check("responses API: a streamed response is stored before its last event (chained at once)", async () => {
  let id = null, fin = null;
  const types = [];
  for await (const ev of await client.responses.create({ ...rbase, input: q1, stream: true })) {
    types.push(ev.type);
    if (ev.type === "response.created") id = ev.response.id;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") fin = ev.response;
    if (ev.type === "response.reasoning_text.delta") assert.equal(typeof ev.content_index, "number"); // Codex needs it
  }
  assert.ok(id && fin && fin.id === id);
  // Codex reads usage with input_tokens_details.cached_tokens from the final event
  assert.equal(typeof fin.usage.input_tokens_details.cached_tokens, "number");
  assert.equal(fin.usage.total_tokens, fin.usage.input_tokens + fin.usage.output_tokens);
  if (fin.status === "incomplete") assert.equal(fin.incomplete_details.reason, "max_output_tokens");
  const next = await client.responses.create({ ...rbase, previous_response_id: id, input: q2 });
  assert.ok(next.usage.input_tokens_details.cached_tokens >= fin.usage.input_tokens);
  const got = await client.responses.retrieve(id);
  assert.deepEqual(got.output, fin.output);
});

await check("responses API: store false, delete and unknown ids get OpenAI's 404", async () => {
  const r = await client.responses.create({ ...rbase, input: q1, store: false, max_output_tokens: 2 });
  assert.equal(r.store, false);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
  await assert.rejects(client.responses.create({ ...rbase, previous_response_id: r.id, input: q2 }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.code, "previous_response_not_found");
    assert.equal(e.param, "previous_response_id");
    assert.equal(e.type, "invalid_request_error");
    assert.equal(e.error.message, `Previous response with id '${r.id}' not found.`);
    return true;
  });
  const s = await client.responses.create({ ...rbase, input: q1, max_output_tokens: 2 });
  await client.responses.delete(s.id);
  await assert.rejects(client.responses.retrieve(s.id), (e) => e.status === 404);
  await assert.rejects(client.responses.create({ ...rbase, previous_response_id: s.id, input: q2 }), (e) => e.status === 404);
  await assert.rejects(client.responses.delete(s.id), (e) => e.status === 404);
});

await check("responses API: namespace tools come back as calls with name and namespace", async () => {
  const tools = [{ type: "namespace", name: "crm", description: "Customer records.", tools: [
    { type: "function", name: "lookup", description: "Find a customer.", strict: false, parameters: weather.function.parameters }] },
  { type: "web_search" }]; // a hosted tool: dropped
  const r = await client.responses.create({ model: "codelm", input: "Find the customer in Oslo.", tools, tool_choice: "required",
    max_output_tokens: 96, seed: 2 });
  const fc = r.output.find((o) => o.type === "function_call");
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, "lookup");
  assert.equal(fc.namespace, "crm");
  assert.match(fc.call_id, /^call_/);
  // streamed: the same call in output_item.added / .done
  let added = null, done = null;
  for await (const ev of await client.responses.create({ model: "codelm", input: "Find the customer in Oslo.", tools,
    tool_choice: "required", max_output_tokens: 96, seed: 2, stream: true })) {
    if (ev.type === "response.output_item.added" && ev.item.type === "function_call") added = ev.item;
    if (ev.type === "response.output_item.done" && ev.item.type === "function_call") done = ev.item;
  }
  assert.equal(added.name, "lookup");
  assert.equal(added.namespace, "crm");
  assert.equal(done.arguments, fc.arguments);
  // the call and its output sent back (by reference and explicitly) render alike
  const out = { type: "function_call_output", call_id: fc.call_id, output: "{\"customer\": \"Ada\"}" };
  const a = await client.responses.create({ model: "codelm", tools, previous_response_id: r.id, input: [out], max_output_tokens: 8, temperature: 0 });
  const b = await client.responses.create({ model: "codelm", tools, store: false, input: [{ role: "user", content: "Find the customer in Oslo." }, ...r.output, out],
    max_output_tokens: 8, temperature: 0 });
  assert.equal(a.usage.input_tokens, b.usage.input_tokens);
  assert.deepEqual(said(a.output), said(b.output));
  assert.ok(a.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens);
});

await check("responses API: every field Codex and the SDK send is accepted; background: true is refused", async () => {
  const r = await client.responses.create({
    model: "codelm", input: [{ type: "message", role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
      { type: "message", role: "user", content: [{ type: "input_text", text: "hi" }] }],
    store: false, include: ["reasoning.encrypted_content"], prompt_cache_key: "k1", client_metadata: { turn_id: "t" },
    metadata: { a: "b" }, service_tier: "auto", safety_identifier: "s", truncation: "auto", user: "u",
    text: { verbosity: "low" }, top_logprobs: 0, background: false, reasoning: { effort: "low", summary: "auto" },
    parallel_tool_calls: true, tool_choice: "auto", max_tool_calls: 3, prompt_cache_retention: "in-memory",
    stream_options: null, conversation: null, prompt: null, previous_response_id: null, max_output_tokens: 4,
  });
  assert.equal(r.object, "response");
  assert.deepEqual(r.metadata, { a: "b" });
  assert.deepEqual(r.reasoning, { effort: "low", summary: "auto" });
  await assert.rejects(client.responses.create({ model: "codelm", input: "hi", background: true }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, "background");
    return true;
  });
});

await check("responses API: cut by max_output_tokens ends with response.incomplete", async () => {
  const types = [];
  let fin = null;
  for await (const ev of await client.responses.create({ model: "codelm", input: q1, max_output_tokens: 3, stream: true, store: false })) {
    types.push(ev.type);
    if (ev.type === "response.incomplete") fin = ev.response;
  }
  assert.equal(types[types.length - 1], "response.incomplete");
  assert.equal(fin.status, "incomplete");
  assert.equal(fin.incomplete_details.reason, "max_output_tokens");
  assert.equal(fin.usage.output_tokens, 3);
});

const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
await check("anthropic messages: text, tools, streaming, count_tokens", async () => {
  const m = await anthropic.messages.create({ model: "local-model", max_tokens: 8, system: "Be brief.", messages: [{ role: "user", content: "Hi" }] });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.ok(["end_turn", "max_tokens", "stop_sequence"].includes(m.stop_reason));
  const t = await anthropic.messages.create({
    model: "local-model", max_tokens: 96, messages: [{ role: "user", content: "Weather in Rome?" }],
    tools: [{ name: "get_weather", description: "weather", input_schema: weather.function.parameters }], tool_choice: { type: "any" },
  });
  const tu = t.content.find((b) => b.type === "tool_use");
  assert.ok(tu, JSON.stringify(t.content));
  assert.ok(["tool_use", "max_tokens"].includes(t.stop_reason), t.stop_reason);
  if (t.stop_reason === "tool_use") assert.equal(typeof tu.input.city, "string");
  const events = [];
  const s = anthropic.messages.stream({ model: "local-model", max_tokens: 8, messages: [{ role: "user", content: "Hi" }] });
  for await (const ev of s) events.push(ev.type);
  const fin = await s.finalMessage();
  assert.equal(events[0], "message_start");
  assert.ok(events.includes("message_stop"));
  assert.equal(fin.type, "message");
  const ct = await anthropic.messages.countTokens({ model: "local-model", messages: [{ role: "user", content: "Hi" }] });
  assert.ok(ct.input_tokens > 0);
});

// ---- Anthropic Messages as Claude Code 2.1 sends it -------------------------------------------------
const nonce = `n${process.pid}${Date.now()}`;
const ccBody = (extra) => ({
  model: "claude-opus-5-5",
  max_tokens: 8,
  system: [
    { type: "text", text: "x-anthropic-billing-header: cc_version=2.1.332.93d; cc_entrypoint=sdk-cli; cch=1a2b3;" },
    { type: "text", text: `You are a coding agent ${nonce}.`, cache_control: { type: "ephemeral" } },
  ],
  messages: [
    { role: "user", content: [{ type: "text", text: "<system-reminder>ctx</system-reminder>" }, { type: "text", text: "list the files" }] },
    { role: "system", content: [{ type: "text", text: "# Environment\ncwd: /tmp/p", cache_control: { type: "ephemeral" } }] },
  ],
  tools: [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }],
  thinking: { type: "adaptive", display: "omitted" },
  context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
  output_config: { effort: "medium" },
  metadata: { user_id: JSON.stringify({ device_id: "d", session_id: "s" }) },
  ...extra,
});

await check("anthropic: Claude Code 2.1's request (system inside messages, thinking adaptive, context_management, output_config, cache_control, ?beta=true)", async () => {
  const m = await anthropic.beta.messages.create(ccBody({}), { headers: { "anthropic-beta": "claude-code-20250219,context-management-2025-06-27" } });
  assert.equal(m.type, "message");
  const ct = await anthropic.messages.countTokens(ccBody({ max_tokens: undefined }));
  // count_tokens is exact: the usage of the request sums to it; cache_control asked for caching,
  // so the part computed now is reported as written to the cache
  const u = m.usage;
  assert.equal(u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens, ct.input_tokens, JSON.stringify(u));
  assert.ok(u.cache_creation_input_tokens > 0, JSON.stringify(u));
  // the same prefix again: read from the cache
  const m2 = await anthropic.beta.messages.create(ccBody({ messages: [...ccBody({}).messages, { role: "user", content: "and now?" }] }));
  assert.ok(m2.usage.cache_read_input_tokens >= ct.input_tokens - 8, JSON.stringify(m2.usage));
  // streamed, the final message_delta carries the same split
  const s = anthropic.messages.stream(ccBody({}));
  const fin = await s.finalMessage();
  assert.equal(fin.usage.input_tokens + fin.usage.cache_creation_input_tokens + fin.usage.cache_read_input_tokens, ct.input_tokens);
  assert.ok(fin.usage.cache_read_input_tokens > 0);
});

await check("anthropic: a prompt past the context is invalid_request_error 'prompt is too long: N tokens > M maximum'", async () => {
  const body = { model: "m", max_tokens: 4, messages: [{ role: "user", content: "word ".repeat(3000) }] };
  const ct = await anthropic.messages.countTokens(body);
  let err = null;
  try { await anthropic.messages.create(body); } catch (e) { err = e; }
  assert.ok(err, "no error");
  assert.equal(err.status, 400);
  assert.equal(err.error.type, "error");
  assert.equal(err.error.error.type, "invalid_request_error");
  const mm = /^prompt is too long: (\d+) tokens > (\d+) maximum$/.exec(err.error.error.message);
  assert.ok(mm, err.error.error.message);
  assert.equal(Number(mm[1]), ct.input_tokens);
  assert.ok(Number(mm[1]) > Number(mm[2]));
});

await check("openai: a prompt past the context is context_length_exceeded", async () => {
  let err = null;
  try { await client.chat.completions.create({ model: "codelm", max_tokens: 4, messages: [{ role: "user", content: "word ".repeat(3000) }] }); } catch (e) { err = e; }
  assert.ok(err && err.status === 400, String(err));
  assert.equal(err.code, "context_length_exceeded");
  assert.equal(err.type, "invalid_request_error");
  assert.match(err.message, /maximum context length is 2048 tokens/);
  err = null;
  try { await client.responses.create({ model: "codelm", input: "word ".repeat(3000) }); } catch (e) { err = e; }
  assert.ok(err && err.status === 400 && err.code === "context_length_exceeded", String(err));
});

await check("a tool schema the converter refuses: served with tool_choice auto (calls parsed from free output), 400 with required", async () => {
  const odd = { type: "function", function: { name: "odd", parameters: { type: "object", properties: { x: { not: { type: "string" } } } } } };
  const r = await client.chat.completions.create({ model: "codelm", messages: msgs, max_tokens: 4, tools: [weather, odd] });
  assert.equal(r.object, "chat.completion");
  let err = null;
  try { await client.chat.completions.create({ model: "codelm", messages: msgs, max_tokens: 4, tools: [weather, odd], tool_choice: "required" }); } catch (e) { err = e; }
  assert.ok(err && err.status === 400 && err.param === "tools", String(err));
  assert.match(err.message, /\bnot\b/, JSON.stringify(err.error));
});

await check("HEAD and GET / and /api/hello answer 200 without a key (clients' connection probes)", async () => {
  for (const path of ["/", "/api/hello"]) {
    for (const method of ["HEAD", "GET"]) {
      const r = await fetch(`${base}${path}`, { method });
      assert.equal(r.status, 200, `${method} ${path}`);
    }
  }
  const r = await fetch(`${base}/v1/models`);
  assert.equal(r.status, 401);
});

// A server whose template has think markers (Qwen3.5's: the generation prompt opens <think>):
// the budget is enforced, display omitted puts the reasoning in the signature, and the block
// sent back renders the same prompt — the next turn reuses it.
if (thinkBase) {
  const th = new Anthropic({ baseURL: thinkBase, apiKey: key, maxRetries: 0 });
  await check("anthropic: thinking.budget_tokens is enforced, display omitted round-trips through the signature", async () => {
    const msgs = [{ role: "user", content: "Why is the sky blue?" }];
    for (const budget of [1, 4, 9]) {
      const m = await th.messages.create({ model: "m", max_tokens: 48, temperature: 0, messages: msgs, thinking: { type: "enabled", budget_tokens: budget } });
      const t = m.content.find((b) => b.type === "thinking");
      assert.ok(t, JSON.stringify(m.content));
      const ntok = (await fetch(`${thinkBase}/tokenize`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ content: t.thinking }) }).then((r) => r.json())).tokens.length;
      assert.ok(ntok <= budget + 1, `budget ${budget}: ${ntok} tokens of reasoning: ${JSON.stringify(t.thinking)}`);
      assert.ok(m.content.some((b) => b.type === "text") || m.stop_reason === "max_tokens", JSON.stringify(m.content));
    }
    const req = { model: "m", max_tokens: 24, temperature: 0, messages: msgs, thinking: { type: "enabled", budget_tokens: 6, display: "omitted" } };
    const a = await th.messages.create(req);
    const omitted = a.content.find((b) => b.type === "thinking");
    assert.ok(omitted && omitted.thinking === "" && omitted.signature.startsWith("deja1."), JSON.stringify(a.content));
    const shown = await th.messages.create({ ...req, thinking: { type: "enabled", budget_tokens: 6 } });
    const full = shown.content.find((b) => b.type === "thinking");
    assert.equal(Buffer.from(omitted.signature.slice(6), "base64").toString(), full.thinking);
    // streamed: no thinking_delta, one signature_delta with the same signature
    const events = [];
    const st = th.messages.stream(req);
    st.on("streamEvent", (e) => events.push(e));
    const sfin = await st.finalMessage();
    assert.ok(!events.some((e) => e.type === "content_block_delta" && e.delta.type === "thinking_delta"));
    assert.equal(sfin.content.find((b) => b.type === "thinking").signature, omitted.signature);
    // the next turn sends the omitted block back (Qwen3.5's template drops the reasoning of earlier
    // turns): its prompt reuses all of this one's up to the opened think block
    const next = await th.messages.create({ ...req, messages: [...msgs, { role: "assistant", content: a.content }, { role: "user", content: "And at sunset?" }] });
    const ct = await th.messages.countTokens({ model: "m", messages: msgs });
    assert.ok(next.usage.cache_read_input_tokens >= ct.input_tokens - 4, JSON.stringify(next.usage));
  });
}

console.log(`${passed} checks passed`);
