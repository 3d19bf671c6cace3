"""What the proxy keeps (Redis, SQLite, a writer thread): shared decisions, traces, metrics.

    replicated.py    small named tables replicas share (in process, or Redis with `redis_url`), and the limits
                     held in Redis (a key's slots, the probe rate)
    traces.py        the trace record of one request, and its stored document (pure)
    trace_store.py   the SQLite store of trace documents
    recorder.py      what the chat route calls to trace a request, and the thread that stores it
    metrics.py       the Prometheus metrics of one app
    telemetry.py     OpenTelemetry spans of requests and rounds (the optional [otel] extra; off: nothing)
"""
