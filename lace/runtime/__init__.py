"""The agent runtime: turns driven by the database inbox, under limits, publishing events."""
