"""Constructions: hand-built heads, the tracr compile glue, the runtime, model files; the catalogue.

Core modules (imported by everything above them; they import nothing of the project above):
    primitives  the head factories programs are written with (prev_token, last_occurrence,
                pointer_lookup, last_occurrence_upto, fact_lookup, position_map, match,
                memorise), POSITION, LABEL, Read, DEFAULT_HARDNESS
    nodes       the node types (HeadSpec, HeadRead, Read, the *Spec data) and HEAD_KINDS,
                the one table of head kinds and their properties
    reference   the reference (hardmax) semantics: evaluate, Evaluator, attended_keys
    heads       the heads' CRAFT (QK / OV) weights
    angles      angle (cos, sin) positions: QK circuits of width independent of N
    memory      the least-squares solver of memorise heads
    directions  residual-stream directions shared by heads, memory and angles
    compiler    RASP (+ hand-built heads) -> tracr -> explicit weights
    model       CompiledModel: weights, vocabularies, encode/decode
    runtime     the one jitted batched forward (softmax / hardmax / ReLU attention)
    io          the model file format: save / load / read_metadata (safetensors + JSON)
    files       atomic, symlink-safe file writers and the one numpy-to-JSON converter
    lens        optional export to TransformerLens
    params      typed, validated parameters and sweeps
    errors      the error types (DepthcraftError and its kinds)
    version     the installed package version

The catalogue (:mod:`depthcraft.constructions.catalogue`) sits above ``rasp_programs``:
the named constructions with their task, source and bound formulas.
"""
