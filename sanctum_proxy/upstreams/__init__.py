"""The model servers (network and a child process): everything that reaches an upstream.

    client.py        `Upstream`: one pool of identical backends, the only module that talks HTTP to them
    pools.py         `UpstreamPools`: which upstream serves which model (`[[upstreams]]`, globs, aliases)
    affinity.py      one backend per conversation in a pool of several (session key, rendezvous hashing)
    capabilities.py  what an upstream can do for a model, asked once (llama.cpp /props, Ollama /api/show)
    auto_mode.py     auto mode's memory: native or prompted per (upstream, model)
    embedded.py      the embedded llama-server child on the packaged model
"""
