"""The Responses API front door (OpenAI's, Open Responses): ``models`` holds its request models apart
from the implementation (it imports only ``serve.core``); ``translate`` maps a request onto a session,
``items`` a session's records back onto response objects and events, ``routes`` and ``conversations``
are its routes. Imports the sessions and below; the gateway mounts it."""
