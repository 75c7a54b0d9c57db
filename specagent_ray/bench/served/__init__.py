"""The served path measured: the Ray Serve application (or its coordinator in process) under load, restarts
and faults, and what a call between replicas, the session binder and the GPU meter cost."""
