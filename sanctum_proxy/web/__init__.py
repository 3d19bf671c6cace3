"""HTTP plumbing around the routes: who may call, how much, and how answers are written.

    auth.py          client keys for /v1/*, the admin key for /sanctum/* and /metrics
    limits.py        requests in flight on /v1/*, body size and read deadline (ASGI middleware)
    header_timeout.py  a deadline on the request head and room for new connections (uvicorn's HTTP protocols)
    request_id.py    X-Request-Id in and out (ASGI middleware)
    access_log.py    one JSON line per request (ASGI middleware and the chat line)
    json_response.py JSON rendered with orjson, and the one place an error becomes a response
"""
