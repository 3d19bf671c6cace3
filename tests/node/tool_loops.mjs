// Tool loops of the JS clients against the proxy, for tests/clients/test_ai_sdk.py, test_openai_node.py and
// test_openai_agents_js.py.
// Usage: node tool_loops.mjs BASE_URL LOOP STREAM  (LOOP: ai-sdk | runTools | agents; STREAM: 0 | 1)
// Prints one JSON line: {calls, text} when the loop ended, {calls, error: {name, message, status}} when it failed.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { z } from "zod";

const [baseURL, loop, streamFlag] = process.argv.slice(2);
const stream = streamFlag === "1";
const ask = "What is the weather in Paris? Use the get_weather tool.";
const calls = [];
// What every client's get_weather returns (tests/clients/scenarios.py `weather`).
const weather = (city) => { calls.push(city); return `${city}: sunny, 21 C, wind 7 km/h (station report 4711)`; };

async function aiSdk() {
  const provider = createOpenAICompatible({ name: "sanctum", baseURL, apiKey: "x" });
  const options = {
    model: provider.chatModel("m"),
    tools: {
      get_weather: tool({
        description: "Current weather for a city.",
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => weather(city),
      }),
    },
    stopWhen: stepCountIs(5),
    maxRetries: 0,
    prompt: ask,
  };
  if (!stream) return (await generateText(options)).text;
  const result = streamText(options);
  let text = "";
  for await (const part of result.fullStream) {
    if (part.type === "error") throw part.error;  // streamText reports failures as parts of its stream
    if (part.type === "text-delta") text += part.text;
    if (part.type === "start-step") text = "";  // the final text is the last step's
  }
  return text;
}

async function runTools() {
  const client = new OpenAI({ baseURL, apiKey: "x", maxRetries: 0 });
  const runner = client.chat.completions.runTools({
    model: "m",
    stream,
    messages: [{ role: "user", content: ask }],
    tools: [{
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather for a city.",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        parse: JSON.parse,
        function: ({ city }) => weather(city),
      },
    }],
  });
  return await runner.finalContent();
}

// The OpenAI Agents SDK (@openai/agents) with its default model, the Responses API.
async function agents() {
  setTracingDisabled(true);  // no trace export to api.openai.com
  const getWeather = agentTool({
    name: "get_weather",
    description: "Current weather for a city.",
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => weather(city),
  });
  const agent = new Agent({ name: "weather", instructions: "Answer with the tools.", model: "m", tools: [getWeather],
                           modelSettings: { temperature: 0 } });  // for the real llama-server (tests/e2e)
  const runner = new Runner({ modelProvider: new OpenAIProvider({ apiKey: "x", baseURL }) });
  if (!stream) return (await runner.run(agent, ask)).finalOutput;
  const result = await runner.run(agent, ask, { stream: true });
  for await (const _ of result) { /* drain the events */ }
  await result.completed;
  if (result.error) throw result.error;
  return result.finalOutput;
}

const loops = { "ai-sdk": aiSdk, runTools, agents };
try {
  const text = await loops[loop]();
  console.log(JSON.stringify({ calls, text }));
} catch (error) {
  const status = error.statusCode ?? error.status ?? null;
  console.log(JSON.stringify({ calls, error: { name: error.constructor?.name ?? error.name, message: String(error.message), status } }));
}
