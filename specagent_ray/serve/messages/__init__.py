"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``): a stateless wire over the
shared agent service. ``models`` (the bodies), ``translate`` (requests in), ``answer`` (messages and
streams out), ``routes`` (``mount_messages``)."""
