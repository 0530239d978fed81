"""Constructions: hand-built heads, the tracr compile glue, the registry, the runtime.

Modules:
    primitives  hand-built heads as RASP expressions and their reference semantics
    heads       their CRAFT (QK / OV) weights
    compiler    RASP (+ hand-built heads) -> tracr -> explicit weights
    model       CompiledModel: weights, vocabularies, encode/decode
    runtime     the one jitted batched forward (softmax / hardmax / ReLU attention)
    registry    named constructions with their task, source and bound formulas
"""
