"""The agent-aware engine features (prefill ahead, priority), each off then on, on real vLLM engines."""
