"""torchrun support: ranks split the shards, rank 0 gathers every rank's scores.

Without torchrun (no WORLD_SIZE > 1 in the environment) this is a single process of rank 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mine(self, shards: list) -> list:
        """This rank's shards: every world-th one, starting at its rank."""
        return shards[self.rank :: self.world]

    def gather(self, items: list) -> list:
        """Every rank's ``items``, concatenated in rank order (on every rank)."""
        if self.world == 1:
            return items
        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, items)
        return [item for part in everyone for item in part]

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def init_ranks(device: str) -> tuple[Ranks, str]:
    """Join the process group that torchrun describes, if any; return the ranks and this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Ranks(), device
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    return Ranks(dist.get_rank(), dist.get_world_size()), device


def close(ranks: Ranks) -> None:
    if ranks.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
