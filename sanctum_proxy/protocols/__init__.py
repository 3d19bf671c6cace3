"""The client protocols: the chat request as read, and the others translated to and from the chat round loop
(pure: no I/O).

    chat_request.py    the OpenAI chat request: validation, the `sanctum` controls, the tools offered
    reply.py           what the round loop answered, read once for every protocol
    function_tools.py  a translated request's `tools` as chat function tools
    stream_writer.py   what the chat, Responses and Messages stream writers share (held omens, the end)
    responses_api.py   OpenAI Responses API (POST /v1/responses): request -> chat body, answer -> response
    responses_events.py  its stream: the loop's events as `response.*` SSE events
    messages_api.py    Anthropic Messages API (POST /v1/messages): request -> chat body, answer -> message
    messages_events.py   its stream: the loop's events as `message_*` / `content_block_*` SSE events
"""
