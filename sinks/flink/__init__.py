"""The Flink shell of the exactly-once Delta sink: marker-driven writer and global committer functions."""
