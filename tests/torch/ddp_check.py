"""A real torch.distributed (gloo, env://) program, run unchanged under loom.

Every process checks that the launcher's contract agrees with what
torch.distributed sees, all-reduces its rank, trains a tiny model with
DistributedDataParallel for a few steps and checks that every rank ends with
the same weights. It prints one line that the test asserts on and exits
non-zero on any mismatch.
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    env = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE", "NODE_RANK",
                                      "MASTER_ADDR", "MASTER_PORT")}
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != int(env["RANK"]) or world != int(env["WORLD_SIZE"]):
        print(f"mismatch: torch rank={rank} world={world} env={env}")
        return 1

    total = torch.tensor([float(rank)])
    dist.all_reduce(total)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)  # each rank sees different data
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(everyone, weights)
    in_sync = all(torch.allclose(w, weights) for w in everyone)
    dist.barrier()
    dist.destroy_process_group()

    print(f"rank={rank} world={world} local_rank={env['LOCAL_RANK']} "
          f"local_world={env['LOCAL_WORLD_SIZE']} node_rank={env['NODE_RANK']} "
          f"master={env['MASTER_ADDR']} rank_sum={total.item():.0f} "
          f"ddp_in_sync={in_sync}", flush=True)
    return 0 if in_sync else 1


if __name__ == "__main__":
    sys.exit(main())
