"""The commit-group rule of `cp.async` (PTX ISA, cp.async.commit_group / cp.async.wait_group):
a thread's copies since its last commit form a group at the commit, and `wait_group N` waits
until at most N of its committed groups are still pending, the newest ones; a group never
committed is retired by no wait. One bookkeeping for the static checks and the interpreter."""
from __future__ import annotations


class CommitGroups:
    """One thread's (or thread class's) copies: `open` since the last commit, `committed`
    groups in flight, oldest first; items are whatever the caller tracks per copy."""

    def __init__(self):
        self.open: list = []
        self.committed: list = []

    def issue(self, item) -> None:
        self.open.append(item)

    def commit(self) -> None:
        self.committed.append(self.open)
        self.open = []

    def wait(self, pending: int) -> list:
        """The items a wait_group(`pending`) retires, oldest group first (removed)."""
        cut = max(0, len(self.committed) - pending)
        retired = [item for group in self.committed[:cut] for item in group]
        self.committed = self.committed[cut:]
        return retired

    def in_flight(self) -> list:
        """The items not yet retired: the open ones, then the committed groups' in order."""
        return self.open + [item for group in self.committed for item in group]


__all__ = ["CommitGroups"]
