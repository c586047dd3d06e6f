"""A torch.distributed (gloo, env://) training loop that checkpoints.

Trains a tiny DDP model for --steps steps, --step-seconds each. Every
--every steps rank 0 saves {step, model, optimizer} to
$LOOM_CHECKPOINT_DIR/ckpt.pt (written to a temporary file, then renamed) and
tells loom: with --loom, by running `loom checkpoint --step N`; with --http,
by sending the request that command sends itself (`report_checkpoint`, for a
program in a container image, where there is no loom binary). On start every
rank resumes from that file when it exists. Prints one line per event,
flushed, for the fault-tolerance tests to follow:
  start run=R rank=K world=W resumed_from=S
  step N
  checkpoint N
  done steps=N
"""
import argparse
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import torch
import torch.distributed as dist


def report_checkpoint(step):
    """Tells loom that the job saved a checkpoint at `step`, as `loom
    checkpoint --step N` does (docs/fault-tolerance.md, "Checkpoints"):
    POST $LOOM_SERVER/v1/jobs/$LOOM_JOB_ID/checkpoint with {"step": N}, the
    job's token $LOOM_TOKEN (set when the server has auth on) as a bearer
    token. LOOM_SERVER may list several servers (a replicated controller),
    comma-separated: a server that cannot be reached, is busy (503) or is a
    standby (307, the leader in X-Loom-Leader) passes to the next one.
    Returns the job as the server answers it."""
    job = os.environ["LOOM_JOB_ID"]
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if os.environ.get("LOOM_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["LOOM_TOKEN"]
    context = None
    if os.environ.get("LOOM_CA_CERT"):  # for an https server, as for the CLI
        context = ssl.create_default_context(cafile=os.environ["LOOM_CA_CERT"])
    body = json.dumps({"step": step}).encode()
    urls = [u.strip().rstrip("/") for u in os.environ["LOOM_SERVER"].split(",")
            if u.strip()]
    urls = [u if "://" in u else "http://" + u for u in urls]
    failures = []
    for url in urls:
        request = urllib.request.Request(f"{url}/v1/jobs/{job}/checkpoint",
                                         data=body, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10,
                                        context=context) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as e:
            if e.code not in (307, 503):
                raise RuntimeError(f"{url}: HTTP {e.code}: "
                                   f"{e.read().decode(errors='replace')}")
            leader = e.headers.get("X-Loom-Leader")
            if leader and leader not in urls:
                urls.append(leader)
            failures.append(f"{url}: HTTP {e.code}")
        except OSError as e:  # URLError, a refused connection, a timeout
            failures.append(f"{url}: {e}")
    raise RuntimeError("cannot report the checkpoint: " + "; ".join(failures))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--step-seconds", type=float, default=0.25)
    report = ap.add_mutually_exclusive_group()
    report.add_argument("--loom", help="the loom binary: report each checkpoint "
                        "with `loom checkpoint --step N` (LOOM_JOB_ID, LOOM_SERVER)")
    report.add_argument("--http", action="store_true", help="report each "
                        "checkpoint with the server's HTTP API (report_checkpoint)")
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
                elif args.http:
                    report_checkpoint(step)
                print(f"checkpoint {step}", flush=True)
            dist.barrier()
    dist.destroy_process_group()
    print(f"done steps={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
