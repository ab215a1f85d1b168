#!/usr/bin/env bash
# jobmanager | taskmanager: run that Flink process in the foreground from the pyflink wheel.
# demo: produce sample events and submit the main job to the cluster named by LAKESTREAM__FLINK__JOBMANAGER.
set -euo pipefail
# FLINK_PROPERTIES (flat "key: value" lines) follow the Flink configuration it starts from (the wheel's
# conf/config.yaml, or $FLINK_CONF_DIR/config.yaml when that is set), kept as config.yaml.base so that a
# restarted container writes the same file again: Flink refuses a flat key that appears twice.
export FLINK_HOME="$(python -c 'import os, pyflink; print(os.path.dirname(pyflink.__file__))')"
conf="${FLINK_CONF_DIR:-$FLINK_HOME/conf}/config.yaml"
if [ -n "${FLINK_PROPERTIES:-}" ]; then
  [ -f "$conf.base" ] || cp "$conf" "$conf.base"
  { cat "$conf.base"; printf '\n%b\n' "$FLINK_PROPERTIES"; } > "$conf.tmp"
  mv "$conf.tmp" "$conf"
fi
case "${1:-demo}" in
  jobmanager) exec "$FLINK_HOME/bin/jobmanager.sh" start-foreground ;;
  taskmanager) exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground ;;
  demo) exec python -m cli demo ;;
  *) exec "$@" ;;
esac
