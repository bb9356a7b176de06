"""layoutkit.dsl.check: the static protocol check of a traced kernel - the IR walked for every
thread of a CTA (or cluster) into layoutkit.sync's protocol model (`extract`, `events`, `values`),
then decided by layoutkit.sync (`protocol`).
"""
from .protocol import ProtocolError, ProtocolWarning, check_kernel_protocol, protocol_check_skipped

__all__ = ["ProtocolError", "ProtocolWarning", "check_kernel_protocol", "protocol_check_skipped"]
