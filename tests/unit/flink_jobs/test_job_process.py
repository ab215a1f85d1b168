"""A child job's failure, summarised from its output."""

from __future__ import annotations

from demo.job_process import failure_summary

FLINK_FAILURE = """\
Traceback (most recent call last):
  File "/x/flink_jobs/demo_job.py", line 50, in main
py4j.protocol.Py4JJavaError: An error occurred while calling o0.execute.
: org.apache.flink.runtime.client.JobExecutionException: Job execution failed.
\tat org.apache.flink.runtime.jobmaster.JobResult.toJobExecutionResult(JobResult.java:144)
Caused by: org.apache.flink.runtime.JobException: Recovery is suppressed by FixedDelayRestartBackoff
\tat org.apache.flink.runtime.executiongraph.failover.ExecutionFailureHandler.handleFailure(X.java:1)
Caused by: org.apache.flink.runtime.JobException: Recovery is suppressed by FixedDelayRestartBackoff
Caused by: java.lang.RuntimeException: Error received from SDK harness
Caused by: sinks.sink_errors.StagedFileMissingError: staged file /t/a.parquet is missing
\tat org.apache.beam.x(Y.java:2)
\t... 12 more
"""


def test_the_root_causes_are_picked_from_a_flink_failure() -> None:
    summary = failure_summary(FLINK_FAILURE).splitlines()
    assert summary == [
        "Caused by: org.apache.flink.runtime.JobException: Recovery is suppressed by "
        "FixedDelayRestartBackoff",
        "Caused by: java.lang.RuntimeException: Error received from SDK harness",
        "Caused by: sinks.sink_errors.StagedFileMissingError: staged file /t/a.parquet is missing",
        ": org.apache.flink.runtime.client.JobExecutionException: Job execution failed.",
    ]


def test_without_causes_the_last_lines_are_shown() -> None:
    output = "\n".join(f"line {i}" for i in range(40)) + "\nlakestream: configuration error: bad key\n"
    summary = failure_summary(output, lines=3).splitlines()
    assert summary == ["line 38", "line 39", "lakestream: configuration error: bad key"]
