#!/usr/bin/env bash
# Submit a prefray sweep as a Ray Job to any Ray cluster whose job server (dashboard) is reachable.
#
#   jobs/submit.sh [--address http://HEAD_IP:8265] [--no-wait] [-m] OVERRIDES... run.dir=DIR
#
# The address defaults to $RAY_DASHBOARD, else http://127.0.0.1:8265. run.dir is required and must be
# absolute (a path on the node that runs the driver, or a shared mount): the job's working directory
# is a temporary copy that Ray deletes later. The working directory uploaded is this checkout without
# outputs/, .git/ and caches. API keys never travel with the job: they come from the environment of
# the cluster's nodes (`ray start` run with them exported, or a Kubernetes Secret; see jobs/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
address="${RAY_DASHBOARD:-http://127.0.0.1:8265}"
wait_flag=()
overrides=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --address) address="$2"; shift 2 ;;
    --address=*) address="${1#--address=}"; shift ;;
    --no-wait) wait_flag=(--no-wait); shift ;;
    *) overrides+=("$1"); shift ;;
  esac
done
run_dir=""
for override in "${overrides[@]}"; do
  case "$override" in run.dir=*) run_dir="${override#run.dir=}" ;; esac
done
case "$run_dir" in
  /* | *://*) ;;
  *) echo "jobs/submit.sh: give run.dir=ABSOLUTE_PATH (on the driver's node or a shared mount); got '${run_dir}'" >&2
     exit 2 ;;
esac
: "${PYTHON:=python}"
runtime_env=$("$PYTHON" -c 'import json, sys; print(json.dumps({"working_dir": ".", "excludes": sys.argv[1:]}))' \
  "outputs/" ".git" "**/__pycache__/" "*.sqlite" "*.egg-info/" ".pytest_cache/" "bench/out/" "tests/")
echo "prefray: submitting to $address; results land in run.dir=$run_dir on the node running the driver (the head node)"
# Ray's clients let RAY_ADDRESS win over --address; RAY_API_SERVER_ADDRESS wins over both.
RAY_API_SERVER_ADDRESS="$address" "$PYTHON" -m ray.scripts.scripts job submit --address "$address" \
  --runtime-env-json "$runtime_env" \
  "${wait_flag[@]}" -- python -m prefray.launch "${overrides[@]}"
echo "prefray: results in run.dir=$run_dir (metrics.csv, metrics.md, shards/) on the driver's node"
