"""One module per call format a model may write into text (hermes, mistral, llama, pythonic, qwen_xml,
json_blocks, ...) and `registry`, which runs them in order; `families` says which format a model family
was trained on. Codecs only find and read calls; they never judge
them against a schema (that is `repair`'s job)."""
