"""Where and how Flink runs: the environment, the JVM, slots, checkpoint markers and the Python workers."""
