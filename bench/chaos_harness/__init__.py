"""The chaos harness (`bench/chaos.py`): replicas sharing Redis, clients checking the proxy's
promises while replicas are killed and restarted. One module per part, each within 500 lines."""
