"""Where training runs: executors (docker / host), containers, run records, launch, status/logs/stop."""
