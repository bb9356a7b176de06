"""layoutkit's recipes: kernels written with the public API only, one module per recipe.

A recipe module defines ``compile_default() -> {name: ptx}`` (the specializations it builds by
default, no GPU needed) and, for ``layoutkit run``, ``check()`` and ``benchmark()``. A module
whose name starts with ``_`` is a recipe's helper (``_flash_attention_kernel``), run by no
command. Import them as ``import recipes.softmax`` from anywhere; nothing here depends on the
working directory.
"""
