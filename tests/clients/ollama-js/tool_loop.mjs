// ollama-js in its default configuration (new Ollama({host}): /api/chat) runs a tool loop against ROOT.
// Usage: node tool_loop.mjs ROOT MODEL STREAM(0|1) THINK(0|1)
// Prints one JSON line: {ran, text, thinking, discovery} when the loop ended, {ran, error: {name, message}} when not.
import { Ollama } from "ollama";

const [root, model, stream, think] = process.argv.slice(2);
const ASK = "What is the weather in Paris? Use the get_weather tool.";
const weather = (city) => `${city}: sunny, 21 C, wind 7 km/h (station report 4711)`; // scenarios.py `weather`
const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather for a city",
  parameters: { type: "object", properties: { city: { type: "string", description: "The city" } },
    required: ["city"] } } }];
const options = { num_ctx: 8192, top_k: 20, temperature: 0.2 };
const client = new Ollama({ host: root });
const ran = [];

async function turn(messages) {
  const request = { model, messages, tools, options, keep_alive: "10m", ...(think === "1" ? { think: true } : {}) };
  if (stream !== "1") {
    const r = await client.chat(request);
    return { calls: r.message.tool_calls ?? [], content: r.message.content, thinking: r.message.thinking ?? "" };
  }
  let calls = [], content = "", thinking = "";
  for await (const part of await client.chat({ ...request, stream: true })) {
    calls = calls.concat(part.message.tool_calls ?? []);
    content += part.message.content ?? "";
    thinking += part.message.thinking ?? "";
  }
  return { calls, content, thinking };
}

async function main() {
  const messages = [{ role: "user", content: ASK }];
  const thinking = [];
  for (let i = 0; i < 4; i++) {
    const got = await turn(messages);
    thinking.push(got.thinking);
    if (got.calls.length === 0) {
      const discovery = { version: (await client.version()).version,
        models: (await client.list()).models.map((m) => m.name),
        capabilities: (await client.show({ model })).capabilities,
        ps: (await client.ps()).models.map((m) => m.name) };
      return { ran, text: got.content, thinking, discovery };
    }
    messages.push({ role: "assistant", content: got.content, tool_calls: got.calls });
    for (const call of got.calls) {
      if (typeof call.function.arguments !== "object") throw new Error(`arguments not an object: ${JSON.stringify(call)}`);
      ran.push(call.function.arguments);
      messages.push({ role: "tool", content: weather(call.function.arguments.city), tool_name: call.function.name });
    }
  }
  throw new Error("no final answer after 4 turns");
}

main().then((out) => console.log(JSON.stringify(out)),
  (error) => console.log(JSON.stringify({ ran, error: { name: error.name, message: String(error.message),
    status: error.status_code ?? null } })));
