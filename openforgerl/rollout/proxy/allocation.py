"""Which shard of a sharded proxy each rollout lives on, and how loaded each shard is.

Used on both sides of the admin API: by the front of ``forge proxy --workers N`` (``ShardFront``) for the
clients that send it ``POST /rollouts``, and by a run's ``ProxyHandle`` when it talks to the shards
directly. A new rollout goes to the shard with the fewest live rollouts (then the fewest created, then
the lowest index), counted *before* the create call returns so concurrent creates spread.

Invariant: ``live[i]`` is the number of rollouts reserved on shard ``i`` and neither cancelled nor
finished; a rollout's finish is counted once however often it is sent. Owners stay known after the
finish (its trajectory is read afterwards).
"""

from __future__ import annotations


class ShardLoad:
    def __init__(self, shards: int) -> None:
        self.live = [0] * shards
        self.created = [0] * shards
        self._owner: dict[str, int] = {}
        self._finished: set[str] = set()

    def pick(self) -> int:
        """The shard the next rollout would go to."""
        return min(range(len(self.live)), key=lambda i: (self.live[i], self.created[i], i))

    def reserve(self) -> int:
        """Pick a shard for a rollout about to be created there, and count it live."""
        shard = self.pick()
        self.live[shard] += 1
        self.created[shard] += 1
        return shard

    def cancel(self, shard: int) -> None:
        """The create on ``shard`` failed: it holds no new rollout after all."""
        self.live[shard] -= 1

    def own(self, rollout_id: str, shard: int) -> None:
        """The create on ``shard`` succeeded with ``rollout_id``."""
        self._owner[rollout_id] = shard

    def owner(self, rollout_id: str) -> int | None:
        return self._owner.get(rollout_id)

    def finish(self, rollout_id: str) -> None:
        """``rollout_id`` finished (counted once; an unknown id changes nothing)."""
        shard = self._owner.get(rollout_id)
        if shard is not None and rollout_id not in self._finished:
            self._finished.add(rollout_id)
            self.live[shard] -= 1
