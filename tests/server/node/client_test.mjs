// Drives a running `dsinfer serve` with the official openai npm client: models, completions and chat
// completions, streaming and not, n > 1, and an error. Usage: node client_test.mjs PORT [API_KEY]
// Exits 0 when every check passes (loopback only).
import OpenAI from "openai";
import assert from "node:assert/strict";

const port = process.argv[2];
const apiKey = process.argv[3] ?? "unused";
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;
console.log(`model: ${model}`);
assert.equal((await client.models.retrieve(model)).id, model);
await assert.rejects(client.models.retrieve("no-such-model"), (err) => err instanceof OpenAI.NotFoundError);

const completion = await client.completions.create({ model, prompt: "def fib(n):", max_tokens: 16, temperature: 0 });
assert.equal(completion.object, "text_completion");
assert.equal(typeof completion.choices[0].text, "string");
assert.ok(completion.choices[0].text.length > 0);
assert.equal(completion.usage.completion_tokens, 16);
console.log(`completion: ${JSON.stringify(completion.choices[0].text)}`);

let streamed = "";
let finish = null;
const stream = await client.completions.create({ model, prompt: "def fib(n):", max_tokens: 16, temperature: 0, stream: true });
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(streamed, completion.choices[0].text);
assert.equal(finish, "length");

const messages = [{ role: "user", content: "Write a Python function that adds two numbers." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(typeof chat.choices[0].message.content, "string");
console.log(`chat: ${JSON.stringify(chat.choices[0].message.content)}`);

let chatStreamed = "";
let usage = null;
const chatStream = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of chatStream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) chatStreamed += c.delta?.content ?? "";
}
assert.equal(chatStreamed, chat.choices[0].message.content);
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);

const many = await client.chat.completions.create({ model, messages, max_tokens: 4, n: 2, temperature: 0 });
assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);

// Structured outputs: the SDK's parse helper with a strict JSON schema (bounded: a boolean and an enum, so the
// answer ends within max_tokens even through the longest whitespace runs).
const parsed = await client.beta.chat.completions.parse({
  model,
  messages: [{ role: "user", content: "Is it ready?" }],
  max_tokens: 400,
  temperature: 0,
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "status",
      strict: true,
      schema: {
        type: "object",
        properties: { ready: { type: "boolean" }, level: { enum: ["low", "high"] } },
        required: ["ready", "level"],
        additionalProperties: false,
      },
    },
  },
});
const status = parsed.choices[0].message.parsed;
assert.equal(parsed.choices[0].finish_reason, "stop");
assert.deepEqual(Object.keys(status), ["ready", "level"]);
assert.equal(typeof status.ready, "boolean");
assert.ok(["low", "high"].includes(status.level));
console.log(`structured output: ${parsed.choices[0].message.content}`);
await assert.rejects(
  client.chat.completions.create({
    model, messages, max_tokens: 4,
    response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "number", multipleOf: 3 } } },
  }),
  (err) => err instanceof OpenAI.BadRequestError && /multipleOf/.test(err.message),
);

await assert.rejects(
  client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 }),
  (err) => err instanceof OpenAI.APIError && err.status === 404,
);
await assert.rejects(
  client.completions.create({ model, prompt: "x", max_tokens: -5 }),
  (err) => err instanceof OpenAI.BadRequestError && err.status === 400,
);
console.log("openai client test: all checks passed");
