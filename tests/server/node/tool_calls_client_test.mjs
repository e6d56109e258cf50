// Tool calling through the official openai npm client, against a server whose engine answers every request
// with "Checking." and two DeepSeek-V3 calls (started by tests/server/tool_calls_test.cpp): the answer's
// tool_calls, the streaming helper's accumulated final message, the SDK's runTools loop sending the tools'
// results back, and a refused tool_choice. Usage: node tool_calls_client_test.mjs PORT
import OpenAI from "openai";
import assert from "node:assert/strict";

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const model = (await client.models.list()).data[0].id;

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city now.",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } },
];
const messages = [{ role: "user", content: "Weather in Paris and the time?" }];

const answer = await client.chat.completions.create({ model, messages, tools, max_tokens: 200 });
const message = answer.choices[0].message;
assert.equal(answer.choices[0].finish_reason, "tool_calls");
assert.equal(message.content, "Checking.");
assert.deepEqual(message.tool_calls.map((c) => c.function.name), ["get_weather", "get_time"]);
assert.deepEqual(JSON.parse(message.tool_calls[0].function.arguments), { city: "Paris" });
assert.ok(message.tool_calls.every((c) => c.type === "function" && c.id.startsWith("call_")));

// The SDK's stream helper accumulates the deltas into the same message.
const stream = client.beta.chat.completions.stream({ model, messages, tools, max_tokens: 200 });
const streamed = (await stream.finalChatCompletion()).choices[0];
assert.equal(streamed.finish_reason, "tool_calls");
assert.equal(streamed.message.content, "Checking.");
assert.deepEqual(
  streamed.message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
  message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
);

// The assistant message goes back as the SDK returned it (text and calls), with the tools' results.
const followup = await client.chat.completions.create({
  model,
  tools,
  max_tokens: 200,
  messages: [
    ...messages,
    message,
    { role: "tool", tool_call_id: message.tool_calls[0].id, content: "20 C" },
    { role: "tool", tool_call_id: message.tool_calls[1].id, content: "12:00" },
  ],
});
assert.equal(followup.choices[0].finish_reason, "tool_calls");

// runTools calls the functions and sends their results until the answer has no calls (here: it always has,
// so it stops at maxChatCompletions).
const seen = [];
const runner = client.beta.chat.completions.runTools(
  {
    model,
    messages,
    max_tokens: 200,
    tools: [
      { type: "function", function: { name: "get_weather", parameters: tools[0].function.parameters, function: (a) => { seen.push(a.city); return "20 C"; }, parse: JSON.parse } },
      { type: "function", function: { name: "get_time", parameters: {}, function: () => "12:00" } },
    ],
  },
  { maxChatCompletions: 2 },
);
await runner.done();
assert.deepEqual(seen, ["Paris", "Paris"]);

await assert.rejects(
  client.chat.completions.create({ model, messages, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
  (err) => err instanceof OpenAI.BadRequestError && err.status === 400,
);
console.log("tool calls client test: all checks passed");
