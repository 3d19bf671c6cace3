"""llama-index's FunctionAgent on its Ollama LLM (llama-index-llms-ollama, /api/chat), run by the interpreter of
tests/clients/.venv-llama-index. Usage: python llama_index_ollama_loop.py ROOT MODEL STREAM THINK
Prints one JSON line: {calls, text} when the run ended, {calls, error: {name, message}} when it failed."""

import asyncio
import json
import sys

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.ollama import Ollama

ASK = "What is the weather in Paris? Use the get_weather tool."
calls: list[str] = []


def get_weather(city: str) -> str:
    """Current weather for a city."""
    calls.append(city)
    return f"{city}: sunny, 21 C, wind 7 km/h (station report 4711)"  # tests/clients/scenarios.py `weather`


async def main(root: str, model: str, stream: bool, think: bool) -> str:
    llm = Ollama(model=model, base_url=root, request_timeout=30.0, keep_alive="10m", thinking=think or None)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(get_weather)], llm=llm, streaming=stream)
    return str(await agent.run(user_msg=ASK))


if __name__ == "__main__":
    root, model, stream, think = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
    try:
        print(json.dumps({"calls": calls, "text": asyncio.run(main(root, model, stream, think))}))
    except Exception as error:  # reported to the test, which checks what the framework raised
        print(json.dumps({"calls": calls, "error": {"name": type(error).__name__, "message": str(error)}}))
