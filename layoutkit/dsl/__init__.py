"""layoutkit.dsl: the kernel tracer, IR, verifier and lowering to PTX.

Imports: layoutkit.algebra, layoutkit.sync, layoutkit.ptx. Not yet written: see the open issue
"The kernel DSL".
"""
