"""Sessions and their coordinator: a session's state and journal, its turns, the runner that drives
Algorithm 1 for it, admission, shards, reports and usage, conversations, and resuming after a restart.
Imports the engines, the tool host, the log and the core; nothing of the front doors."""
