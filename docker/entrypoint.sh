#!/usr/bin/env bash
# jobmanager | taskmanager: run that Flink process in the foreground from the pyflink wheel.
# demo: produce sample events and submit the main job to the cluster named by LAKESTREAM__FLINK__JOBMANAGER.
# create-bucket NAME...: create buckets on the S3 store at AWS_ENDPOINT_URL (AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY), through the S3 API; one already there is kept.
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
# Beam logs a Python worker's whole environment, the AWS secret key among it, at INFO when it closes the
# worker: the foreground processes' log keeps that logger to errors (docs/object-storage.md, "On a
# cluster"). Appended to a kept .base copy as above.
log_conf="${FLINK_CONF_DIR:-$FLINK_HOME/conf}/log4j-console.properties"
if [ -f "$log_conf" ]; then
  [ -f "$log_conf.base" ] || cp "$log_conf" "$log_conf.base"
  { cat "$log_conf.base"
    printf '%s\n' "logger.beamenv.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory" \
      "logger.beamenv.level = ERROR"; } > "$log_conf.tmp"
  mv "$log_conf.tmp" "$log_conf"
fi
case "${1:-demo}" in
  jobmanager) exec "$FLINK_HOME/bin/jobmanager.sh" start-foreground ;;
  taskmanager) exec "$FLINK_HOME/bin/taskmanager.sh" start-foreground ;;
  demo) exec python -m cli demo ;;
  create-bucket)
    shift
    exec python -c '
import os, sys
from devtools.s3_server import REGION, S3Endpoint, create_bucket
env = os.environ
store = S3Endpoint(
    env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_REGION", REGION)
)
for name in sys.argv[1:]:
    print(f"s3://{name}:", "created" if create_bucket(store, name) else "already there", flush=True)
' "$@" ;;
  *) exec "$@" ;;
esac
