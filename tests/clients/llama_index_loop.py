"""llama-index's FunctionAgent on OpenAILike, run by the interpreter of its own venv (tests/clients/.venv-llama-index:
llama-index 0.14 requires openai<3, the suite runs openai 3). Usage: python llama_index_loop.py BASE_URL STREAM
Prints one JSON line: {calls, text} when the run ended, {calls, error: {name, message}} when it failed."""

import asyncio
import json
import sys

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

ASK = "What is the weather in Paris? Use the get_weather tool."
calls: list[str] = []


def get_weather(city: str) -> str:
    """Current weather for a city."""
    calls.append(city)
    return f"{city}: sunny, 21 C, wind 7 km/h (station report 4711)"  # tests/clients/scenarios.py `weather`


async def main(base_url: str, stream: bool) -> str:
    llm = OpenAILike(model="m", api_base=base_url, api_key="x", is_chat_model=True, is_function_calling_model=True,
                     max_retries=0)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(get_weather)], llm=llm, streaming=stream)
    return str(await agent.run(user_msg=ASK))


if __name__ == "__main__":
    try:
        print(json.dumps({"calls": calls, "text": asyncio.run(main(sys.argv[1], sys.argv[2] == "1"))}))
    except Exception as error:  # reported to the test, which checks what the framework raised
        print(json.dumps({"calls": calls, "error": {"name": type(error).__name__, "message": str(error)}}))
