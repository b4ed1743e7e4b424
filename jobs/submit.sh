#!/usr/bin/env bash
# Submit a prefray sweep as a Ray Job. Usage: RAY_DASHBOARD=http://HEAD_IP:8265 jobs/submit.sh OVERRIDES...
# API keys are not passed through the job: export them where the head node's Ray was started.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RAY_DASHBOARD:=http://127.0.0.1:8265}"
exec ray job submit --address "$RAY_DASHBOARD" --working-dir . -- python -m prefray.launch "$@"
