"""Ray Serve pieces: engines through ray.serve.llm (the coordinator and gateway come with issue 4)."""
