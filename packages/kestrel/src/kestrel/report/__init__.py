"""How a launch reports: progress, status, profile, driver and node logs."""
