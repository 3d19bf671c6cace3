"""The pure core every layer speaks: no I/O, no state, nothing from the rest of the package but errors.

    calls.py         offered tools, candidate and mended calls, problems: the data passed between the layers
    shapes.py        the wire shapes crossing the layers (chat message, tool call, usage, answer meta, JSONValue)
    openai_chat.py   the OpenAI chat shapes the proxy writes (completion, chunk, message, tool call, usage,
                     the `sanctum` block, the error body): TypedDicts and the builders that fix their key order
    lenient_json.py  one JSON value out of text a model wrote, and where such a value ends
    tool_names.py    a tool name as the model wrote it -> an offered one
    omens.py         the observable events of one request, and how they are rendered
    reasoning.py     where a model's reasoning is in its text (never read for calls)
    legacy.py        the legacy `functions` / `function_call` API mapped onto tools and back
"""
