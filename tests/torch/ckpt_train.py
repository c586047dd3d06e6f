"""A torch.distributed (gloo, env://) training loop that checkpoints.

Trains a tiny DDP model for --steps steps, --step-seconds each. Every
--every steps rank 0 saves {step, model, optimizer} to
$LOOM_CHECKPOINT_DIR/ckpt.pt (written to a temporary file, then renamed) and,
with --loom, tells loom (`loom checkpoint --step N`); on start every rank
resumes from that file when it exists. Prints one line per
event, flushed, for the fault-tolerance test to follow:
  start run=R rank=K world=W resumed_from=S
  step N
  checkpoint N
  done steps=N
"""
import argparse
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--step-seconds", type=float, default=0.25)
    ap.add_argument("--loom", help="the loom binary: report each checkpoint "
                    "with `loom checkpoint --step N` (LOOM_JOB_ID, LOOM_SERVER)")
    args = ap.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(os.environ["LOOM_CHECKPOINT_DIR"], "ckpt.pt")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    print(f"start run={os.environ.get('LOOM_RESTART_COUNT')} rank={rank} "
          f"world={world} resumed_from={step}", flush=True)
    while step < args.steps:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        time.sleep(args.step_seconds)
        print(f"step {step}", flush=True)
        if step % args.every == 0:
            dist.barrier()
            if rank == 0:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                torch.save({"step": step, "model": model.module.state_dict(),
                            "opt": opt.state_dict()}, path + ".tmp")
                os.replace(path + ".tmp", path)
                if args.loom:
                    subprocess.run([args.loom, "checkpoint", "--step", str(step)],
                                   check=True, stdout=subprocess.DEVNULL)
                print(f"checkpoint {step}", flush=True)
            dist.barrier()
    dist.destroy_process_group()
    print(f"done steps={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
