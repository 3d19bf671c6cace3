"""Everything that reaches an upstream model server: HTTP pools, routing, affinity, probes and the embedded llama-
server.
"""
