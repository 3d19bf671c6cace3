"""What the proxy keeps: shared decisions and limits (replicated), traces (traces, trace_store, recorder), metrics,
OpenTelemetry spans.
"""
