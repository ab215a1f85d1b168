#!/usr/bin/env bash
# jobmanager | taskmanager: run that Flink process in the foreground from the pyflink wheel.
# demo: produce sample events and submit the main job to the cluster named by LAKESTREAM__FLINK__JOBMANAGER.
set -euo pipefail
export FLINK_HOME="$(python -c 'import os, pyflink; print(os.path.dirname(pyflink.__file__))')"
if [ -n "${FLINK_PROPERTIES:-}" ]; then
  printf '%b\n' "$FLINK_PROPERTIES" >> "$FLINK_HOME/conf/config.yaml"
fi
case "${1:-demo}" in
  jobmanager) exec "$FLINK_HOME/bin/jobmanager.sh" start-foreground ;;
  taskmanager) exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground ;;
  demo) exec python -m flink_jobs demo ;;
  *) exec "$@" ;;
esac
