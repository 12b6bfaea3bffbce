"""Structured output: grammars (JSON schema, regex, choice, tool-call tags) that constrain sampling.

`spec` says what a request wants (plain data, no engine imports), `compiler` turns it into the
grammar engine's compiled form off the engine thread, once per distinct spec, and `matcher` follows
one request's output token by token and writes the token mask the sampler applies.
"""
