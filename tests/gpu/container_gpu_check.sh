#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU (not run by ctest): a container task
# of one GPU sees exactly that GPU, with the host driver's files injected
# (docs/images.md, "GPU driver files"). A loopback registry holds a busybox
# image with the host's C library and nothing of NVIDIA's; a loom server
# and one real (NVML, not emulated) agent run `nvidia-smi -L` in it, the
# nvidia-smi and libnvidia-ml the agent injects from the host (a CDI spec
# when the host has one, else the files next to the NVML library loaded).
# It asserts exactly one line "GPU 0: ... (UUID: U)", U the UUID of the host
# GPU the task was given, CUDA_VISIBLE_DEVICES=0, and one GPU device node.
# It changes none of the GPU's settings (nvidia-smi -L, --query-gpu and -q
# only read), uses loopback only, and removes what it made.
# Usage (root): tests/gpu/container_gpu_check.sh PATH_TO_LOOM
# Exit status: 0 passed, 1 failed, 2 cannot run here (what is missing is
# said).
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/../.."
source tests/lib/cluster.sh
source tests/lib/registry.sh
T0=$(date +%s)
cannot() {
  echo "CANNOT RUN: $*"
  exit 2
}
[ "$(id -u)" = 0 ] || cannot "needs root (runc)"
command -v nvidia-smi > /dev/null || cannot "no nvidia-smi: this host has no NVIDIA driver"
for tool in docker-registry umoci skopeo jq runc curl python3 ldd /bin/busybox; do
  command -v "$tool" > /dev/null || cannot "$tool is not installed (scripts/setup.sh --test installs them)"
done
nvidia-smi -L > "$W/host-gpus.txt" 2>&1 || cannot "nvidia-smi -L fails on the host: $(cat "$W/host-gpus.txt")"
NGPUS=$(grep -c '^GPU [0-9]*:' "$W/host-gpus.txt")
[ "$NGPUS" -ge 1 ] || cannot "the host has no GPU: $(cat "$W/host-gpus.txt")"

# The cluster: one node of the host's GPUs, under loom's model name for them
# (docs/agent.md, "GPU discovery").
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
MODEL=$(python3 - "$GPU_NAME" <<'PY'
import re, sys
words = [w.lower() for w in sys.argv[1].split()]
while words and words[0] in ("nvidia", "tesla", "geforce", "quadro"):
    words.pop(0)
model = words[0] if words else "unknown"
if model in ("rtx", "titan") and len(words) > 1:
    model += words[1]
if "-" in model[1:]:
    model = model[: model.index("-", 1)]
print(re.sub(r"[^a-z0-9_.]", "", model) or "unknown")
PY
)
MEM_KIB=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
cat > "$W/cluster.yaml" <<YAML
name: gpu-check
gpu_models: [{name: $MODEL, memory: ${GPU_MIB}Mi}]
pools:
  - {name: gpu, nodes: 1, gpu: {model: $MODEL, count: $NGPUS}, cpus: $(nproc), memory: ${MEM_KIB}Ki}
YAML

# The image: busybox, plus the C library nvidia-smi and libnvidia-ml (and a
# busybox that is not static) need, at the paths the host's loader found
# them, and no NVIDIA file.
NVML=$(python3 -c '
import ctypes
ctypes.CDLL("libnvidia-ml.so.1")
print(next(l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml.so" in l))') ||
  cannot "libnvidia-ml.so.1 cannot be loaded on the host"
mkdir -p "$W/image"
for lib in $(ldd "$(command -v nvidia-smi)" "$NVML" /bin/busybox 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' | sort -u); do
  case "$(basename "$lib")" in libnvidia* | libcuda*) continue ;; esac
  mkdir -p "$W/image$(dirname "$lib")"
  cp -L "$lib" "$W/image$lib"
done
find "$W/image" -name 'libnvidia*' -o -name 'libcuda*' -o -name 'nvidia-smi' | grep -q . &&
  fail "the test image holds NVIDIA files: $(find "$W/image" -name 'libnvidia*')"

start_registry
DIGEST=$(push_busybox_image test/gpu-check:1 "$W/image") || fail "push the image"
start_server --insecure-registry "$REG"
"$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.1:$((PORT + 1))" --name gpu-0 \
  --data-dir "$W/agent" --join-token-file "$W/join.token" --insecure-registry "$REG" \
  --health-interval 0 >> "$W/agent.log" 2>&1 &
PIDS+=($!)
wait_for 60 sh -c "'$LOOM' nodes -o json 2>/dev/null | grep -q '\"up\"'" ||
  fail "the agent did not register: $(tail -5 "$W/agent.log")"

"$LOOM" run -g 1 --name gpu-check --image "$REG/test/gpu-check:1" -- /bin/sh -c '
  echo "nvd=$NVIDIA_VISIBLE_DEVICES cvd=$CUDA_VISIBLE_DEVICES"
  echo "ld=$LD_LIBRARY_PATH"
  echo "devices=$(ls /dev | grep "^nvidia[0-9]" | tr "\n" " ")"
  nvidia-smi -L' > "$W/submit.out" 2>&1 || fail "submit: $(cat "$W/submit.out")"
ID=$("$LOOM" queue --all -o json | jq -r '.. | objects | select(.name? == "gpu-check") | .id' | head -1)
wait_for 120 sh -c "'$LOOM' show $ID -o json 2>/dev/null | jq -e '.state == \"succeeded\" or .state == \"failed\"' > /dev/null" ||
  fail "the job did not end: $("$LOOM" show "$ID")"
"$LOOM" logs "$ID" > "$W/task.out" 2>&1
"$LOOM" logs "$ID" --stderr > "$W/task.err" 2>&1
OUT=$(cat "$W/task.out")
STATE=$(jget "$ID" "j['state']")
NVD=$(sed -n 's/^nvd=\([0-9]*\) .*/\1/p' <<< "$OUT")

echo "== report"
echo "host: $NGPUS GPU(s), $GPU_NAME (loom model $MODEL); image $REG/test/gpu-check:1 ($DIGEST)"
grep -o "container tasks' GPU driver files: .*" "$W/agent.log" | head -1 | sed 's/^/agent: /; s/"$//'
grep "GPU driver files" "$W/agent.log" | grep "level=warn" | sed 's/.*msg="/agent warning: /; s/"$//'
echo "job $ID: $STATE; the task printed:"
sed 's/^/  | /' "$W/task.out"
[ -s "$W/task.err" ] && sed 's/^/  ! /' "$W/task.err"

[ "$STATE" = succeeded ] || fail "the job $STATE"
[ -n "$NVD" ] || fail "no NVIDIA_VISIBLE_DEVICES in the task's output"
LINES=$(grep -c '^GPU [0-9]*:' <<< "$OUT")
[ "$LINES" = 1 ] || fail "nvidia-smi -L inside listed $LINES GPUs, not 1"
grep -q '^GPU 0: ' <<< "$OUT" || fail "the one GPU inside is not GPU 0"
grep -qx "nvd=$NVD cvd=0" <<< "$OUT" || fail "CUDA_VISIBLE_DEVICES is not 0"
WANT_UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$NVD" | tr -d ' ')
grep -q "(UUID: $WANT_UUID)" <<< "$OUT" || fail "the GPU inside is not host GPU $NVD ($WANT_UUID)"
MINOR=$(nvidia-smi -q -i "$NVD" | awk -F: '/Minor Number/ {gsub(/ /, "", $2); print $2; exit}')
grep -qx "devices=nvidia$MINOR " <<< "$OUT" || fail "the devices inside are not /dev/nvidia$MINOR alone"
echo "PASS: the container task saw exactly host GPU $NVD ($WANT_UUID, /dev/nvidia$MINOR) as GPU 0, in $(($(date +%s) - T0)) s"
