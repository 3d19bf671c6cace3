// openai-node against the proxy: the stream helper's final completion and a raw `create({stream: true})`
// loop, printed as one JSON line for tests/test_node_sdk.py. Usage: node stream_calls.mjs BASE_URL OMENS
import OpenAI from "openai";

const [baseURL, omens] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "x", maxRetries: 0, defaultHeaders: { "X-Sanctum-Omens": omens } });
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const messages = [{ role: "user", content: "Weather in Paris and Rome?" }];

const stream = client.chat.completions.stream({ model: "m", messages, tools });
const final = await stream.finalChatCompletion();

const raw = { content: "", names: [], finish: null };
for await (const chunk of await client.chat.completions.create({ model: "m", messages, tools, stream: true })) {
  for (const choice of chunk.choices) {
    raw.content += choice.delta.content ?? "";
    for (const call of choice.delta.tool_calls ?? []) if (call.function?.name) raw.names.push(call.function.name);
    raw.finish = choice.finish_reason ?? raw.finish;
  }
}
console.log(JSON.stringify({ helper: final.choices[0], raw }));
