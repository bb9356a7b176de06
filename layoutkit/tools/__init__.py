"""layoutkit.tools."""
