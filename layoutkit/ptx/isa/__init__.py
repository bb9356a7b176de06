"""PTX instruction families: each function validates its operands and emits through a Kernel.

Use the arch namespace that matches the target: `isa.sm80` (Ampere-era forms) and `isa.sm90`
(re-exports sm80 and adds Hopper forms). Every function takes the kernel first, returns the
destination register(s) it wrote (a fresh SSA register unless `out=` is given), and takes
`pred=` to guard the instruction.
"""
