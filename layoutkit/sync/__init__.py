"""layoutkit.sync: mbarriers, named barriers, fences, warp roles and the barrier-protocol checker.

Imports: layoutkit.ptx only. Not yet written: see the open issue "Hopper by hand".
"""
