"""OpenAI's Chat Completions wire (``POST /v1/chat/completions``) over the shared agent service: its request
models, its translation to and from the service's terms, and its thin route (``mount_chat``)."""
