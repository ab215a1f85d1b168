"""The job graphs (``ingest``, ``land``, ``changefeed``) and how a run of one starts, resumes and ends
(``lifecycle``, ``resume``). Operator uids are stable across releases; DESIGN.md says how to upgrade."""
