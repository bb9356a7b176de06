"""layoutkit.dsl.check: the static protocol check of a traced kernel - the IR walked for every
thread of a CTA (or cluster) into layoutkit.sync's protocol model (`extract`, `values`; each op
contributes its events through its definition's `effects` facet), then decided by
layoutkit.sync (`protocol`).
"""
from .protocol import ProtocolError, ProtocolWarning, check_kernel_protocol, protocol_check_skipped

__all__ = ["ProtocolError", "ProtocolWarning", "check_kernel_protocol", "protocol_check_skipped"]
