"""The repair tiers and the round loop (pure: the loop's sender is injected, nothing here does I/O).

    mend.py          tier 1: read the calls in an answer and mend them locally (codecs, lenient JSON, schema)
    validate.py      arguments against the tool's JSON Schema; coercion of what a model gets wrong
    schemas.py       checking a client's tool schemas (no remote refs, bounded work)
    toolbox.py     the offered tools of one request, by name
    grounding.py     arguments the conversation does not support (invented values)
    repeats.py       a call already answered by a tool result
    correct.py       tier 2: the correction text for a rejected answer
    loop.py          the round loop: a driver over pure next_round / judge steps (state table in its docstring)
    events.py        what the loop yields (deltas, omens, lessons, round records, the Final) and reads (Answer)
    plan.py          Plan: what the loop knows of a request, settled before the first round
    constraint.py    a round's constraint (schema, grammar, tool_choice) and the hidden turns it is sent
    upstream_body.py the body a round sends upstream
    answer_checks.py a round's answer before tier 2: its calls, a refusal, an empty answer, a missing call
    client_message.py  the message, finish reason, omens and outcome of an accepted answer
    follow_up.py     MORE rounds: the next call after a first one (follow_up_calls)
    quoted_calls.py  calls read from an upstream parse failure's quote of the model's output
    usage.py         usage summed over rounds and choices
    offloading.py    which of the loop's steps leave the event loop (core/offload.py)
    upstream_errors.py  which upstream errors mean "no tools here" or "could not parse its own call"
    prompted.py      prompted mode: tools in the system prompt, calls and results as text
    constrain.py     the answer JSON Schema (constrained decoding by schema)
    grammar.py       GBNF grammars for a call in the prompt's own format (llama.cpp)
    streaming.py     the streamed-answer assembler: what may reach the client now, the whole answer at the end
"""
