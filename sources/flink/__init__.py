"""The Flink shells of the sources: the Delta change-feed source and the Kafka input of every job."""
