"""Reading the served layers: gold metrics as served (batch or realtime), current silver, table summaries."""
